// fake_metal.h: what a test controls and reads in the stand-in Metal (tests/fake_metal).
// Plain C, so Python reaches it with ctypes (tests/fake_metal/fake_metal.py wraps it) and
// Objective-C++ test code includes it directly. Metal itself is <Metal/Metal.h>.
//
// Strings returned are owned by the stand-in and stay valid until the next call of the
// same function. Every function may be called from any thread; the stand-in holds one
// lock.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// --- the pretend Mac ---------------------------------------------------------------------

// Replaces the Mac with the one `json` describes; returns 0, or -1 with the reason in
// fake_metal_last_error() (nothing changes then). FAKE_METAL_CONFIG in the environment is
// read the same way at the first Metal call when this was never called. The format:
//   {"devices": [{"name": "AMD Radeon Pro 5500M",       required
//                 "registry_id": 4294967809,            required, unique
//                 "low_power": false, "removable": false, "headless": false,
//                 "unified_memory": false,
//                 "recommended_working_set": 8589934592,
//                 "families": ["Mac2", "Common3"],       Apple1..Apple9, Mac1, Mac2,
//                                                        Common1..3, MacCatalyst1..2, Metal3
//                 "metal_version": "3.1",                highest MSL version it compiles
//                 "gpu_core_count": 0,                   >0: an AGXAccelerator IORegistry entry
//                 "max_buffer_length": 0,                0: recommended_working_set
//                 "memory_limit": 0,                     >0: heaps and standalone buffers past
//                                                        it get nil (device_memory_refused)
//                 "heap_alignment": {"private": 65536},  heap buffers' size granule and
//                                                        alignment per storage mode (shared,
//                                                        managed, private; powers of two);
//                                                        a mode left out: 256
//                 "thread_execution_width": 32,          a compute pipeline's SIMD width
//                 "max_threads_per_threadgroup": 1024,
//                 "max_threadgroup_memory": 32768,       bytes
//                 "pipeline_failures": {"mm_half": "SC compilation failure"}}],
//                                      the kernels whose pipeline fails, with Metal's message
// A library file (newLibraryWithURL:) is JSON: {"functions": [{"name": "add_float"},
// {"name": "blit", "type": "vertex"}]}; the type is "kernel" when left out.
//    "system_default": 0,          index of MTLCreateSystemDefaultDevice()'s device, null: nil
//    "macos": "14.0",              what isOperatingSystemAtLeastVersion: compares with
//    "mpsgraph": true}             whether MPSGraph has the methods the lines probe for
// Unknown keys and wrong types are refused by name. Live objects of the previous Mac keep
// working; MTLCopyAllDevices() returns the new devices.
int fake_metal_configure(const char* json);
const char* fake_metal_last_error(void);
// The name the records use for an MTLStorageMode value ("shared", "managed", "private" ...).
const char* fake_metal_storage_name(unsigned storage_mode);

// --- what happened -------------------------------------------------------------------------

// Every refusal, rule violation and notable event since the last clear, in order, as a
// JSON array of {"kind", "device", "message", ...}; README.md lists the kinds and which
// of them are violations (a correct program never causes one).
const char* fake_metal_records_json(void);
void fake_metal_clear_records(void);
// How many violation records (a subset of the records) exist now.
int fake_metal_violation_count(void);

// --- test controls -------------------------------------------------------------------------

// Completes every committed, uncompleted command buffer in commit order: runs their
// commands (blits copy bytes), then their completed handlers. Returns how many completed.
int fake_metal_complete_command_buffers(void);
// Command buffers committed and not completed.
int fake_metal_pending_command_buffers(void);
// The retain count of the device with this registry id (-1: none).
long fake_metal_device_retain_count(uint64_t registry_id);
// How often the code under test asked the device hasUnifiedMemory or supportsFamily: (-1: no
// such device). Facts that never change are worth asking once (issue 23, finding 8).
long fake_metal_device_queries(uint64_t registry_id);

// --- storage through C (Python tests; Objective-C++ uses the protocols) --------------------
// Handles are the Metal objects themselves (id<...> as void*). fm_* functions that create
// an object return it owned by the caller (+1), NULL when Metal refuses; release it with
// fm_release.

void* fm_copy_device(uint64_t registry_id);
// MTLCreateSystemDefaultDevice() (+1, NULL when the configuration says null).
void* fm_create_system_default_device(void);
// MTLCopyAllDevices()'s registry ids in its order, into ids[0..capacity); returns the count.
size_t fm_all_device_ids(uint64_t* ids, size_t capacity);
void fm_release(void* object);
long fm_retain_count(void* object);
void* fm_new_heap(void* device, uint64_t size, unsigned storage_mode, unsigned cpu_cache_mode,
                  unsigned hazard_tracking_mode, long heap_type);
void* fm_new_heap_with_options(void* device, uint64_t size, uint64_t resource_options);
uint64_t fm_heap_size(void* heap);
uint64_t fm_heap_used_size(void* heap);
uint64_t fm_heap_max_available(void* heap, uint64_t alignment);
unsigned fm_heap_storage_mode(void* heap);
void* fm_heap_new_buffer(void* heap, uint64_t length, uint64_t options);
void* fm_heap_new_buffer_at(void* heap, uint64_t length, uint64_t options, uint64_t offset);
void* fm_device_new_buffer(void* device, uint64_t length, uint64_t options);
uint64_t fm_heap_buffer_size(void* device, uint64_t length, uint64_t options, uint64_t* align);
unsigned fm_buffer_storage_mode(void* buffer);
uint64_t fm_buffer_length(void* buffer);
void* fm_buffer_contents(void* buffer);
void* fm_buffer_heap(void* buffer);
void fm_buffer_did_modify(void* buffer, uint64_t location, uint64_t length);
unsigned fm_set_purgeable(void* resource, unsigned state);
// The bytes the GPU sees (any storage mode): what a blit reads and writes. NULL once
// purged to Empty. Test-only: no Metal call gives a CPU this view of private memory.
void* fm_buffer_gpu_bytes(void* buffer);
void* fm_new_command_queue(void* device);
// retained: 1 for commandBuffer (retains the resources it uses), 0 for
// commandBufferWithUnretainedReferences.
void* fm_new_command_buffer(void* queue, int retained);
// Blits in one encoder: copy, then synchronize `sync` (NULL: none).
void fm_blit_copy(void* command_buffer, void* source, uint64_t source_offset, void* destination,
                  uint64_t destination_offset, uint64_t size, void* sync);
// Adds a completed handler that appends `tag` to the list fm_completed_tags() returns.
void fm_add_completed_tag(void* command_buffer, int tag);
const char* fm_completed_tags(void);
// Takes (hold 1) or gives back (0) a lock on the calling thread; fm_add_gated_handler adds a
// completed handler that takes the same lock. The stand-in runs handlers on a thread of
// their own, as Metal does, so completing that command buffer while the caller holds the
// lock blocks the handler: after FAKE_METAL_HANDLER_TIMEOUT seconds (default 20) the
// stand-in records handler_blocked and returns.
void fm_hold_gate(int hold);
void fm_add_gated_handler(void* command_buffer);
void fm_commit(void* command_buffer);
void fm_wait(void* command_buffer);
unsigned fm_command_buffer_status(void* command_buffer);

#ifdef __cplusplus
}
#endif
