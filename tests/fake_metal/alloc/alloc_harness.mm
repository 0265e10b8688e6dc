// alloc_harness.mm: C entry points that drive one release line's own MPSAllocator.h (the
// official wheel's header with the series applied: patch 0009's hooks into patch 0008's
// MPSHeapStorage.mm) against the stand-in Metal. test_allocator.py calls them via ctypes.
//
// Built per line by tests/fake_metal/alloc/build.py with
//   INTELMAC_TEST_PLACEMENT     1 where the header's heaps are placement heaps (2.14.1 on),
//                               whose AllocParams and newMTLBuffer take more arguments;
//   INTELMAC_TEST_POOL_SELECTION 1 where upstream's own init_buffer_pools/get_pool (from the
//                               exact 2.6.0 MPSAllocator.mm, patched) are compiled in.
// Everything returned is JSON, owned here until the next call.
#if INTELMAC_TEST_POOL_SELECTION
// Upstream's pool selection is private to MPSHeapAllocatorImpl; the test calls it from
// outside, so the class is read with its members public (standard headers first).
#include <atomic>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stack>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#define private public
#endif
#include <ATen/mps/MPSAllocator.h>
#include <ATen/mps/MPSHeapStorage.h>
#if INTELMAC_TEST_POOL_SELECTION
#undef private
#endif
#include <fake_metal.h>

#include <cstring>
#include <string>

using namespace at::mps::HeapAllocator;

// Upstream defines these in MPSAllocator.mm.
namespace at::mps::HeapAllocator {
uint64_t BufferBlock::buffer_counter = 0;
uint64_t HeapBlock::heap_counter = 0;
} // namespace at::mps::HeapAllocator

namespace {

std::string& out() {
  static std::string text;
  return text;
}

const char* give(std::string text) {
  out() = std::move(text);
  return out().c_str();
}

std::string flag(bool value) {
  return value ? "true" : "false";
}

const char* storage_name(MTLStorageMode mode) {
  return fake_metal_storage_name(static_cast<unsigned>(mode)); // the stand-in's own names
}

id<MTLDevice> find_device(uint64_t registry_id) {
  NSArray* devices = [MTLCopyAllDevices() autorelease];
  for (NSUInteger i = 0; i < [devices count]; ++i) {
    id<MTLDevice> device = [devices objectAtIndex:i];
    if ([device registryID] == registry_id) {
      return device;
    }
  }
  return nil;
}

// A line's AllocParams for a request of `size` bytes from `pool`, as alloc_buffer_block
// makes them.
AllocParams make_params(size_t size, BufferPool* pool, id<MTLDevice> device, bool stream_ordered) {
#if INTELMAC_TEST_PLACEMENT
  (void)device;
  return AllocParams(size, size, pool, stream_ordered);
#else
  (void)stream_ordered;
  AllocParams params(size, size, pool);
  params.has_unified_memory = [device hasUnifiedMemory];
  return params;
#endif
}

size_t heap_total(const HeapBlock* heap) {
#if INTELMAC_TEST_PLACEMENT
  return heap->total_size;
#else
  return heap->size.total;
#endif
}

id<MTLBuffer> new_buffer(HeapBlock* heap, size_t size, uint32_t usage) {
#if INTELMAC_TEST_PLACEMENT
  return heap->newMTLBuffer(size, usage, 0);
#else
  return heap->newMTLBuffer(size, usage);
#endif
}

// The stream's GPU work on a scalar buffer: a blit reads it into a private buffer, a
// second blit copies that into a shared buffer the test reads back. `retained`: the
// command buffer keeps strong references ([queue commandBuffer]); otherwise the program
// must keep every buffer alive until it completes.
struct GpuRead {
  id<MTLCommandBuffer> command_buffer = nil;
  id<MTLBuffer> on_gpu = nil;
  id<MTLBuffer> readback = nil;
};

GpuRead read_on_gpu(id<MTLDevice> device, id<MTLBuffer> source, size_t size, bool retained) {
  GpuRead read;
  id<MTLCommandQueue> queue = [device newCommandQueue];
  read.command_buffer = [(retained ? [queue commandBuffer] : [queue commandBufferWithUnretainedReferences]) retain];
  read.on_gpu = [device newBufferWithLength:size options:MTLResourceStorageModePrivate];
  read.readback = [device newBufferWithLength:size options:MTLResourceStorageModeShared];
  id<MTLBlitCommandEncoder> blit = [read.command_buffer blitCommandEncoder];
  [blit copyFromBuffer:source sourceOffset:0 toBuffer:read.on_gpu destinationOffset:0 size:size];
  [blit copyFromBuffer:read.on_gpu sourceOffset:0 toBuffer:read.readback destinationOffset:0 size:size];
  [blit endEncoding];
  [queue release];
  return read;
}

std::string describe_request(id<MTLDevice> device, BufferPool& pool, size_t size, bool stream_ordered,
                             uint64_t value, int release_at) {
  std::string json = "{\"pool_usage\": " + std::to_string(pool.usage) +
      ", \"pool_shared\": " + flag(pool.usage & UsageFlags::SHARED);
  AllocParams params = make_params(size, &pool, device, stream_ordered);
  HeapBlock* heap = HeapBlock::createHeapBlock(params, device, pool.usage);
  if (heap == nullptr) {
    return json + ", \"heap\": null}";
  }
  const bool standalone = [heap->heap isKindOfClass:NSClassFromString(@"IntelmacStandaloneHeap")];
  json += ", \"heap\": \"" + std::string(standalone ? "standalone" : "metal") + "\"" +
      ", \"heap_storage\": \"" + storage_name([heap->heap storageMode]) + "\"" +
      ", \"heap_size\": " + std::to_string(heap_total(heap));
  id<MTLBuffer> buffer = new_buffer(heap, size, pool.usage);
  if (buffer == nil) {
    return json + ", \"buffer\": null}";
  }
  json += ", \"buffer\": {\"storage\": \"" + std::string(storage_name([buffer storageMode])) + "\"" +
      ", \"in_a_metal_heap\": " + flag([buffer heap] != nil) + ", \"length\": " + std::to_string([buffer length]) + "}";
  // As upstream: only a buffer of a SHARED pool is read or written through contents
  // (allocScalarBufferWithValue, getSharedBufferPtr); others take the private paths.
  if (pool.usage & UsageFlags::SHARED) {
    void* cpu = [buffer contents];
    json += ", \"contents\": " + flag(cpu != nullptr);
    if (cpu != nullptr && release_at >= 0) {
      std::memcpy(cpu, &value, sizeof(value)); // allocScalarBufferWithValue's memcpy
      // release_at: 0 early, 1 on completion, with a command buffer that retains its
      // resources; 2 on completion, 3 early, with one that does not.
      GpuRead read = read_on_gpu(device, buffer, sizeof(value), release_at <= 1);
      if (release_at == 0 || release_at == 3) {
        // Released by the allocator before the GPU ran (what upstream never does).
        heap->releaseMTLBuffer(buffer);
      } else {
        // Tied to completion, as upstream's free() of the scalar pool does (a completed
        // handler on the stream) before the block goes back and may be released.
        __block HeapBlock* owner = heap;
        __block id<MTLBuffer> held = buffer;
        [read.command_buffer addCompletedHandler:^(id<MTLCommandBuffer>) {
          owner->releaseMTLBuffer(held);
        }];
      }
      [read.command_buffer commit];
      json += ", \"pending_before_completion\": " + std::to_string(fake_metal_pending_command_buffers());
      fake_metal_complete_command_buffers();
      uint64_t seen = 0;
      std::memcpy(&seen, [read.readback contents], sizeof(seen));
      json += ", \"round_trip\": " + flag(seen == value);
      [read.on_gpu release];
      [read.readback release];
      [read.command_buffer release];
      buffer = nil;
    }
  }
  if (buffer != nil) {
    heap->releaseMTLBuffer(buffer);
  }
  heap->releaseMTLHeap();
  delete heap;
  return json + "}";
}

} // namespace

#if INTELMAC_TEST_POOL_SELECTION
// Upstream's MPSHeapAllocatorImpl::init_allocator, init_buffer_pools, get_pool,
// get_allocation_size, the watermark setters and format_size, cut verbatim at test time
// from the exact 2.6.0 MPSAllocator.mm with the series applied (build.py), and the
// stand-ins they need: the device singleton, the stream and the event pool (the
// constructor only stores those two), and emptyCache (the destructor's; the tests
// release their own buffers).
namespace at::mps {
MPSDevice* MPSDevice::_device = nullptr;
MPSDevice::MPSDevice() : _mtl_device(nil) {}
MPSDevice::~MPSDevice() {}
MPSDevice* MPSDevice::getInstance() {
  static MPSDevice device;
  return &device;
}
MPSStream* getDefaultMPSStream() {
  return nullptr;
}
std::shared_ptr<MPSEventPool> getMPSEventPool() {
  return nullptr;
}
namespace HeapAllocator {
void MPSHeapAllocatorImpl::emptyCache() {}
#include "pool_selection.inc"
} // namespace HeapAllocator
} // namespace at::mps
#endif

extern "C" {

#if INTELMAC_TEST_POOL_SELECTION
// A request through upstream's own allocator on `registry_id`'s device: a fresh
// MPSHeapAllocatorImpl (init_allocator -> init_buffer_pools), then get_allocation_size and
// get_pool for `usage` (0: a device tensor; SHARED: the shared allocator, pinned memory;
// SCALAR: allocScalarBufferWithValue), then the pool's heap and buffer as above.
const char* alloc_upstream_request(uint64_t registry_id, uint32_t usage, uint64_t size, uint64_t value,
                                   int release_at) {
  @autoreleasepool {
    id<MTLDevice> device = find_device(registry_id);
    if (device == nil) {
      return give("{\"error\": \"no such device\"}");
    }
    at::mps::MPSDevice::getInstance()->_mtl_device = device;
    auto* impl = new MPSHeapAllocatorImpl();
    const size_t alloc_size = impl->get_allocation_size(size, usage);
    BufferPool& pool = impl->get_pool(size, alloc_size, usage);
    std::string json = describe_request(device, pool, alloc_size, true, value, release_at);
    delete impl;
    at::mps::MPSDevice::getInstance()->_mtl_device = nil;
    return give(json);
  }
}
#endif

// A request of `size` bytes served from a pool that upstream creates with `pool_flags`
// (its UsageFlags), through the line's header: BufferPool (poolUsage hook on 2.14.1 and
// 2.15.0), HeapBlock::createHeapBlock (newAllocatorHeap hook), newMTLBuffer. With
// release_at >= 0, a CPU-visible buffer also carries `value` to the GPU and back:
// 0 releases it before the command buffer completes, 1 on completion, 2 on completion of
// a command buffer without retained references.
const char* alloc_pool_request(uint64_t registry_id, uint32_t pool_flags, uint64_t size, int stream_ordered,
                               uint64_t value, int release_at) {
  @autoreleasepool {
    id<MTLDevice> device = find_device(registry_id);
    if (device == nil) {
      return give("{\"error\": \"no such device\"}");
    }
    BufferPool pool(device, pool_flags);
    return give(describe_request(device, pool, size, stream_ordered != 0, value, release_at));
  }
}

// What requestUsage() (the 2.14.1/2.15.0 hook in alloc_buffer_block) makes of a request.
uint32_t alloc_request_usage(uint64_t registry_id, uint32_t usage, int stream_ordered) {
  @autoreleasepool {
    return at::mps::requestUsage<UsageFlags>(find_device(registry_id), usage, stream_ordered != 0);
  }
}

double alloc_default_low_watermark(uint64_t registry_id, double upstream_default) {
  @autoreleasepool {
    return at::mps::defaultLowWatermarkRatio(find_device(registry_id), upstream_default);
  }
}

uint32_t alloc_flag(const char* name) {
  const std::string n = name;
  if (n == "SMALL") return UsageFlags::SMALL;
  if (n == "SHARED") return UsageFlags::SHARED;
  if (n == "HAZARD") return UsageFlags::HAZARD;
  if (n == "SCALAR") return UsageFlags::SCALAR;
  return 0;
}

} // extern "C"
