// MPSStoragePolicy.h: where the MPS allocator's memory may live on a Metal GPU.
// Added by the intelmac-torch patch series (0008-mps-allocator-storage).
//
// Every storage decision of the series lives here, in portable C++17 that uses
// only the standard library, so that it compiles and is tested on any host.
// MPSHeapStorage.mm (same patch) gathers two facts about the device and acts on
// what these functions return; hooks in upstream's MPSAllocator.h/.mm call it.
//
// Why any of this is needed. Apple documents, for MTLHeapDescriptor.storageMode,
// that a heap on a Mac GPU that is not Apple silicon can only use private
// storage: newHeapWithDescriptor: gives nil for a shared or managed heap there.
// That is every GPU of an Intel Mac, the Intel iGPU (which reports
// hasUnifiedMemory = YES) as much as an AMD GPU. Standalone buffers
// (newBufferWithLength:options:) may be shared or managed on every Mac GPU by
// the MTLResourceOptions.storageModeShared page, which rules out only shared
// textures off Apple GPUs, and by "Setting resource storage modes" (shared is
// the default for an integrated GPU's buffers, managed for a discrete GPU's).
// Apple's article "Choosing a resource storage mode for Intel and AMD GPUs"
// says instead that shared resources exist only with integrated graphics.
// Upstream itself makes shared buffers on AMD GPUs (Copy.mm's staging buffers,
// MPSStream's error buffer), so this series follows the first two pages; only
// a real AMD GPU can confirm it (docs/mps-device-policy.md lists what else).
// Upstream's allocator keeps all its memory in heaps and asks for shared ones:
// for scalars and, on unified-memory devices, the CPU-visible pools (2.6.0,
// 2.9.1), and for every pool from 2.12 on (2.14.1, 2.15.0).
//
// The rules (API in namespace at::mps::storage, all inline):
//   plan_heap(gpu, requested, heap_size, request_size) -> HeapPlan
//     1. An Apple GPU (MTLGPUFamilyApple1: Apple silicon, also when an x86_64
//        wheel runs under Rosetta) gets exactly the heap upstream asked for.
//     2. Elsewhere a private heap stays a private heap.
//     3. Elsewhere a heap that would be CPU-visible (shared or managed) is never
//        asked of Metal. Its buffers become standalone buffers in shared
//        storage, one Metal allocation each (see kCpuVisibleStorageWhy), and
//        the "heap" is the size of the request it was made for: the allocator
//        counts what Metal gives it, and Metal's refusal comes when the heap
//        is made, where upstream releases its cache and retries.
//     4. On a GPU that is not an Apple GPU, an extra-large heap is at most
//        kDiscreteXLargeHeap, as upstream had it for discrete GPUs before 2.12,
//        unless one request needs more. That includes Intel iGPUs: they report
//        unified memory, which gives upstream's 1 GiB heaps, but their working
//        set is about 1.5 GiB (a UHD 630), so one small tensor would hold most
//        of it and a second heap would not fit.
//   device_tensor_pool_usage(gpu, usage_is_shared)
//     5. On lines whose device tensors live in shared pools (2.14.1, 2.15.0),
//        those pools are private on a GPU that is not an Apple GPU, so device
//        tensors live in private heaps on every line, and upstream's private
//        paths (blit copies, the private fallback of _local_scalar_dense) serve
//        every CPU access to them. Pools that hand the CPU a pointer (scalars,
//        pinned memory) stay shared and take rule 3.
//   host_request_to_cpu_pool(gpu, cpu_reads_at_once)
//     5a. On those lines a request the CPU reads at once (malloc_host, behind
//        pinned memory) goes to the scalar pool, the one pool that stays
//        CPU-visible, on a GPU that is not an Apple GPU.
//   size_with_pool_options(gpu)
//     5b. On those lines a request is sized (heapBufferSizeAndAlignWithLength:
//        options:) with the options of the pool that serves it on a GPU that is
//        not an Apple GPU. Its heaps are placement heaps whose offsets are sums
//        of those sizes, and a pool's alignment is asked with the pool's own
//        options, which rule 5 made private; a size asked with the request's
//        (shared) options is a multiple of the shared alignment only, so a
//        driver that aligns private buffers more coarsely would get misaligned
//        placements. An Apple GPU keeps upstream's sizes.
//   default_low_watermark_ratio(gpu, upstream_default)
//     6. On a GPU without unified memory the default low watermark is 1.0 (the
//        recommended working set), as upstream had it before 2.12. On an Intel
//        GPU (rule 8) it is kIntelLowWatermarkRatio, below that GPU's high one.
//   cpu_pool_min_split(gpu, pool_stays_cpu_visible, upstream_min_split)
//     7. On lines whose heaps are placement heaps (2.14.1, 2.15.0), a pool whose
//        heaps rule 3 makes standalone (the scalar pool, which also serves
//        pinned memory there: rule 5a) never splits a free block on a GPU that
//        is not an Apple GPU: its min_split is kNeverSplit. Such a "heap" is
//        one Metal buffer; upstream places a new buffer on each part of a split
//        block and on each merged range, and off Apple GPUs every such
//        placement is a new standalone allocation that the heap's size does
//        not count and that Metal may refuse once the device is full (where
//        upstream asserts the buffer). Unsplit, each heap holds one block whose
//        buffer is the heap's own: what the allocator counts is what Metal
//        holds, and a refusal can only come when a heap is made, where upstream
//        releases its cache, retries and then raises its out-of-memory error.
//   cpu_pool_block_may_serve(gpu, pool_stays_cpu_visible, block_size, request_size)
//     7a. In a pool rule 7 keeps from splitting, a free block serves a request
//        only when it exceeds the request by at most 1/kReuseSlackDivisor (1/32)
//        of the request; otherwise the request gets a heap of its own size (upstream's
//        alloc_heap), and the free blocks stay cached until the pool needs their
//        memory: before upstream reports out of memory it gives back the free
//        heaps of the pool, then of every pool, and retries. Unsplit, a block
//        handed out is held whole, so without a bound an 8-byte scalar held a
//        freed 24 MiB pinned block. The bound is upstream's own for its large
//        pool: get_allocation_size rounds every large request up to the next of
//        32 buckets per power of two (kLargeBucketShift = 5), so that a freed
//        buffer up to 1/32 larger is reused instead of stranding a new heap; no
//        request here holds more than that. Upstream's other slack, a remainder
//        below its min_split of 1 MiB taken whole, is absolute: it would let a
//        scalar of 8 bytes hold 1 MiB. (2.14.1, 2.15.0: split_free_block.)
//   default_high_watermark_ratio(gpu, upstream_default)
//     8. On an Intel GPU (not an Apple GPU, with unified memory: of an Intel
//        Mac's GPUs only the integrated one) the allocator's default limit is
//        kIntelHighWatermarkRatio times recommendedMaxWorkingSetSize, not
//        upstream's 1.7. Apple documents that working set as what the GPU can
//        allocate "without affecting its runtime performance"; an Intel iGPU's
//        memory is system memory the GPU driver reserves out of the Mac's RAM
//        (1536 MiB on a UHD 630), and past it the driver pages GPU memory while
//        the CPU side of the same process competes for the same RAM.
//        docs/mps-device-policy.md has the sources. Every other GPU keeps
//        upstream's default; PYTORCH_MPS_HIGH_WATERMARK_RATIO still wins.
//   stream_may_become_current(gpu, stream_id, default_stream_id)
//     9. On a GPU that is not an Apple GPU only the default stream may become
//        the current MPS stream (2.15.0, the one line with more than one).
//        Rule 5 keeps device tensors in private pools there, and upstream's
//        recordStream tracks only blocks of SHARED pools, so
//        Tensor.record_stream() cannot keep a tensor's memory from being
//        reused while a second stream still uses it. With one stream there is
//        nothing to defer. stream_refused_message() says so, in the words of
//        the Python check (torch/backends/mps/_memory.py check_stream; a test
//        compares the two).
//   stream_may_allocate(gpu, on_default_stream)
//     9a. For the same reason the allocator serves no request made while a
//        stream other than the default one is current, on a GPU that is not an
//        Apple GPU (2.14.1 and 2.15.0: alloc_buffer_block). Routes that make a
//        stream current without rule 9 (the private torch._C._mps_setStream,
//        which calls setCurrentMPSStream in MPSStream.mm directly) get
//        stream_refused_message() at their first allocation, and a block never
//        moves to another stream there, which would place a fresh buffer on a
//        standalone heap where Metal may refuse it (upstream asserts that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace at::mps::storage {

// What the storage decisions need to know about the Metal device.
struct Gpu {
  bool apple_gpu = false;      // [device supportsFamily:MTLGPUFamilyApple1]
  bool unified_memory = false; // [device hasUnifiedMemory]
};

// Metal's storage modes, named for what they mean to the CPU.
enum class Storage { shared, managed, private_ };

// How the memory of one upstream heap request is provided.
enum class Placement {
  heap,       // a real MTLHeap, as upstream asked (possibly resized)
  standalone, // no MTLHeap: each buffer is its own newBufferWithLength:options:
};

struct HeapPlan {
  Placement placement = Placement::heap;
  Storage storage = Storage::private_;
  std::size_t heap_size = 0; // the size to ask Metal for (Placement::heap)
};

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
// Upstream's "extra large" heap on discrete GPUs before 2.12 (kXLargeHeapD).
inline constexpr std::size_t kDiscreteXLargeHeap = 128 * kMiB;
// Upstream's rounding of requests that get a heap of their own (kRoundLarge).
inline constexpr std::size_t kRoundLarge = 2 * kMiB;
// Upstream's default low watermark on discrete GPUs before 2.12.
inline constexpr double kDiscreteLowWatermarkRatio = 1.0;
// The allocator's default limits on an Intel GPU (rule 8), as multiples of
// recommendedMaxWorkingSetSize. The low one keeps upstream's proportion between
// its unified-memory defaults (1.4 of 1.7, about 0.82), rounded down.
inline constexpr double kIntelHighWatermarkRatio = 1.0;
inline constexpr double kIntelLowWatermarkRatio = 0.8;
// A min_split no free block reaches: the block is never split (rule 7).
inline constexpr std::size_t kNeverSplit = ~std::size_t{0};
// The most a free block of a never-split pool may exceed the request it serves,
// as a fraction of the request (rule 7a): upstream's 32 buckets per power of two
// of large requests (get_allocation_size's kLargeBucketShift = 5).
inline constexpr std::size_t kReuseSlackDivisor = 32;

// Why CPU-visible memory is shared and not managed on a discrete GPU, for the
// docs and the allocator's debug output. Managed storage keeps two copies: the
// CPU must call didModifyRange: after each write and a blit must
// synchronizeResource: before each read of GPU results. Upstream writes
// scalars with memcpy into `contents` and reads results through `contents`
// after waiting on an event, with neither call. Shared storage needs neither:
// the GPU reads system memory directly (over PCIe on a discrete GPU), which is
// what Apple recommends for small data the CPU writes once and the GPU reads
// once, which is what these buffers hold. On an Intel iGPU both live in system
// memory anyway.
inline constexpr const char* kCpuVisibleStorageWhy =
    "shared, not managed: the allocator's CPU paths write and read `contents` without "
    "didModifyRange:/synchronizeResource:, and these buffers are small or read once by the GPU";

// Whether a Metal heap of this storage may be created on this GPU (Apple's
// rule for MTLHeapDescriptor.storageMode on macOS).
inline bool heap_storage_allowed(const Gpu& gpu, Storage storage) {
  return gpu.apple_gpu || storage == Storage::private_;
}

inline std::size_t round_up(std::size_t size, std::size_t alignment) {
  return (size + alignment - 1) / alignment * alignment;
}

// What to do with one heap the allocator asks for: a heap of `heap_size`
// bytes in `requested` storage, made to place a buffer of `request_size`.
inline HeapPlan plan_heap(const Gpu& gpu, Storage requested, std::size_t heap_size, std::size_t request_size) {
  HeapPlan plan{Placement::heap, requested, heap_size};
  if (gpu.apple_gpu) {
    return plan; // rule 1
  }
  if (!heap_storage_allowed(gpu, requested)) {
    plan.placement = Placement::standalone; // rule 3
    plan.storage = Storage::shared;
    plan.heap_size = request_size;
    return plan;
  }
  if (heap_size > kDiscreteXLargeHeap) { // rule 4
    const std::size_t own = round_up(request_size, kRoundLarge);
    const std::size_t wanted = request_size < kDiscreteXLargeHeap / 2 ? kDiscreteXLargeHeap : own;
    plan.heap_size = wanted < heap_size ? wanted : heap_size;
  }
  return plan;
}

// Whether a pool that upstream made shared for device tensors stays shared
// (rule 5). `cpu_pointer_pool`: the pool hands the CPU a pointer into its
// buffers (the scalar pool), so it must stay CPU-visible.
inline bool device_tensor_pool_stays_shared(const Gpu& gpu, bool cpu_pointer_pool) {
  return gpu.apple_gpu || cpu_pointer_pool;
}

// Whether a request the CPU reads at once must be served by the CPU-visible
// (scalar) pool (rule 5a).
inline bool host_request_to_cpu_pool(const Gpu& gpu, bool cpu_reads_at_once) {
  return cpu_reads_at_once && !gpu.apple_gpu;
}

// Whether a request is sized with the options of the pool that serves it
// (rule 5b) instead of the request's own.
inline bool size_with_pool_options(const Gpu& gpu) {
  return !gpu.apple_gpu;
}

// An Intel GPU: of an Intel Mac's GPUs, the one that is not an Apple GPU and
// reports unified memory (AMD GPUs do not; Apple GPUs are Apple1).
inline bool intel_gpu(const Gpu& gpu) {
  return !gpu.apple_gpu && gpu.unified_memory;
}

// The default low watermark ratio (rule 6).
inline double default_low_watermark_ratio(const Gpu& gpu, double upstream_default) {
  if (intel_gpu(gpu)) {
    return kIntelLowWatermarkRatio;
  }
  return gpu.unified_memory ? upstream_default : kDiscreteLowWatermarkRatio;
}

// The default high watermark ratio (rule 8).
inline double default_high_watermark_ratio(const Gpu& gpu, double upstream_default) {
  return intel_gpu(gpu) ? kIntelHighWatermarkRatio : upstream_default;
}

// The smallest free remainder a pool splits off a block (rule 7).
// `pool_stays_cpu_visible`: the pool keeps upstream's SHARED flag after
// device_tensor_pool_stays_shared (the scalar pool), so its heaps are standalone.
inline std::size_t cpu_pool_min_split(const Gpu& gpu, bool pool_stays_cpu_visible, std::size_t upstream_min_split) {
  if (gpu.apple_gpu || !pool_stays_cpu_visible) {
    return upstream_min_split;
  }
  return kNeverSplit;
}

// Whether a free block of `block_size` bytes may serve a request of
// `request_size` (rule 7a). `pool_stays_cpu_visible` as for cpu_pool_min_split.
inline bool cpu_pool_block_may_serve(const Gpu& gpu, bool pool_stays_cpu_visible, std::size_t block_size,
                                     std::size_t request_size) {
  if (gpu.apple_gpu || !pool_stays_cpu_visible || block_size <= request_size) {
    return true;
  }
  return block_size - request_size <= request_size / kReuseSlackDivisor;
}

// Whether the allocator serves a request made while `on_default_stream` is
// false, i.e. another MPS stream is current (rule 9a).
inline bool stream_may_allocate(const Gpu& gpu, bool on_default_stream) {
  return gpu.apple_gpu || on_default_stream;
}

// Whether the stream `stream_id` may become the current MPS stream (rule 9).
inline bool stream_may_become_current(const Gpu& gpu, std::int64_t stream_id, std::int64_t default_stream_id) {
  return gpu.apple_gpu || stream_id == default_stream_id;
}

// The error for a stream rule 9 refuses on `device_name`: what is wrong, why,
// and what to do. The same text as check_stream() in torch/backends/mps/_memory.py.
inline std::string stream_refused_message(const std::string& device_name) {
  return "torch.mps: streams other than the default one are not supported on " + device_name +
      ": Tensor.record_stream() cannot stop the memory of a tensor used on a second stream from being "
      "reused before that stream's work completes (the allocator tracks only CPU-visible memory on Intel "
      "and AMD GPUs). Run this work on the default stream (drop torch.mps.Stream / torch.mps.stream(...) / "
      "torch.Stream('mps') and torch.accelerator.set_stream(...)); MPS orders all of it there.";
}

inline const char* storage_name(Storage storage) {
  switch (storage) {
    case Storage::shared:
      return "shared";
    case Storage::managed:
      return "managed";
    case Storage::private_:
      return "private";
  }
  return "?";
}

} // namespace at::mps::storage
