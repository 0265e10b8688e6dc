// MPSHeapStorage.h: the storage of the MPS allocator's memory, as upstream's
// MPSAllocator.h/.mm see it. Added by the intelmac-torch patch series
// (0008-mps-allocator-storage); MPSAllocator.h includes it (patch 0009).
//
// The decisions are MPSStoragePolicy.h's; MPSHeapStorage.mm reads the device
// and acts on them. Upstream's allocator keeps its own logic (pools, reuse,
// completion handlers); its hooks only route heap creation, the usage of the
// pools and one default through the functions below.
#pragma once

#include <ATen/mps/MPSStoragePolicy.h>
#include <c10/macros/Macros.h>

#include <cstddef>
#include <cstdint>

namespace at::mps {

// Called by MPSGuardImpl::exchangeStream (2.15.0, patch 0012) before a stream
// becomes the current MPS stream, which is what `with torch.Stream("mps"):`
// and at::accelerator::setCurrentStream reach without any Python hook. Raises
// (TORCH_CHECK) on a GPU that is not an Apple GPU when `stream_id` is not the
// default stream's (MPSStoragePolicy.h rule 9); a C++ declaration, as the
// header that calls it is also compiled as C++.
TORCH_API void checkStreamCanBeCurrent(int64_t stream_id, int64_t default_stream_id);

} // namespace at::mps

#ifdef __OBJC__
#include <Metal/Metal.h>

namespace at::mps {

// The one test for a GPU whose heaps may be CPU-visible: an Apple GPU
// (MTLGPUFamilyApple1), which includes an Apple silicon Mac running our x86_64
// wheel under Rosetta. Every storage decision of the series starts from it.
TORCH_API bool isAppleGPU(id<MTLDevice> device);

// The facts MPSStoragePolicy.h decides on.
TORCH_API storage::Gpu storageGpu(id<MTLDevice> device);

// Called by HeapBlock::createHeapBlock in place of [device newHeapWithDescriptor:d].
// Returns what upstream asked for where Metal allows it (an Apple GPU, or a
// private heap; on a GPU without unified memory an extra-large heap is resized).
// A shared or managed heap on any other GPU is never asked of Metal: the object
// returned instead answers the heap messages upstream's allocator sends
// (newBufferWithLength:options:[offset:], size, maxAvailableSizeWithAlignment:,
// setPurgeableState:) and makes each buffer a standalone shared one. Owned by
// the caller, like the result of newHeapWithDescriptor:.
TORCH_API id<MTLHeap> newAllocatorHeap(id<MTLDevice> device, MTLHeapDescriptor* descriptor, size_t request_size);

// The usage flags a BufferPool keeps, on lines whose device tensors live in
// shared pools (2.14.1, 2.15.0): the shared flag is dropped on a GPU that is not
// an Apple GPU unless the pool hands the CPU pointers (the scalar pool), so
// device tensors get private heaps and upstream's private paths. `Flags` is
// upstream's UsageFlags enum (SHARED, SCALAR).
template <typename Flags>
uint32_t poolUsage(id<MTLDevice> device, uint32_t usage) {
  const bool shared = (usage & Flags::SHARED) != 0;
  if (!shared || storage::device_tensor_pool_stays_shared(storageGpu(device), (usage & Flags::SCALAR) != 0)) {
    return usage;
  }
  return usage & ~static_cast<uint32_t>(Flags::SHARED);
}

// The usage one request is served with, on lines whose device tensors live in
// shared pools (2.14.1, 2.15.0): a request the CPU reads at once
// (malloc_host's, for pinned memory: not ordered by a stream) is sent to the
// scalar pool on a GPU that is not an Apple GPU, because poolUsage() made the
// other pools private there. Upstream's scalar pool returns a block only after
// the stream's command buffer completes, and its buffers are standalone shared
// ones (newAllocatorHeap), so the CPU pointer upstream maps is valid.
template <typename Flags>
uint32_t requestUsage(id<MTLDevice> device, uint32_t usage, bool stream_ordered) {
  const bool cpu_reads_at_once = !stream_ordered && (usage & Flags::SHARED) != 0;
  if (!storage::host_request_to_cpu_pool(storageGpu(device), cpu_reads_at_once)) {
    return usage;
  }
  return usage | static_cast<uint32_t>(Flags::SCALAR);
}

// The usage a request of `request_usage` is sized with
// (MPSHeapAllocatorImpl::get_allocation_size), on lines whose heaps are placement
// heaps (2.14.1, 2.15.0), once get_pool() chose the pool of `pool_usage`: the
// pool's own on a GPU that is not an Apple GPU (MPSStoragePolicy.h rule 5b), so
// that every size, and with them every offset the allocator places a buffer at,
// is a multiple of the alignment the pool asked Metal for with those options.
inline uint32_t sizingUsage(id<MTLDevice> device, uint32_t request_usage, uint32_t pool_usage) {
  return storage::size_with_pool_options(storageGpu(device)) ? pool_usage : request_usage;
}

// The smallest free remainder a BufferPool of `pool_usage` (after poolUsage())
// splits off a block, on lines whose heaps are placement heaps (2.14.1, 2.15.0):
// upstream's, except in a pool that stays CPU-visible on a GPU that is not an
// Apple GPU, whose standalone heaps are never split (MPSStoragePolicy.h rule 7).
template <typename Flags>
size_t poolMinSplit(id<MTLDevice> device, uint32_t pool_usage, size_t upstream_min_split) {
  return storage::cpu_pool_min_split(storageGpu(device), (pool_usage & Flags::SHARED) != 0, upstream_min_split);
}

// Whether split_free_block may hand out the free block of `block_size` bytes for a
// request of `request_size` from a BufferPool of `pool_usage`, on lines whose heaps are
// placement heaps (2.14.1, 2.15.0): always, except in a pool that stays CPU-visible
// on a GPU that is not an Apple GPU, whose blocks poolMinSplit() keeps whole: there
// only a block at most 1/32 larger than the request (MPSStoragePolicy.h rule 7a).
// Otherwise split_free_block returns nullptr, and the request gets a heap of its size.
template <typename Flags>
bool poolBlockMayServe(id<MTLDevice> device, uint32_t pool_usage, size_t block_size, size_t request_size) {
  return storage::cpu_pool_block_may_serve(storageGpu(device), (pool_usage & Flags::SHARED) != 0, block_size,
                                           request_size);
}

// Called by alloc_buffer_block (2.14.1, 2.15.0) before it serves a request: raises
// (TORCH_CHECK, stream_refused_message) on a GPU that is not an Apple GPU when a stream
// other than the default one is current (MPSStoragePolicy.h rule 9a).
TORCH_API void checkAllocationStream(id<MTLDevice> device, bool on_default_stream);

// The allocator's default low watermark ratio on `device` (MPSStoragePolicy.h rule 6).
TORCH_API double defaultLowWatermarkRatio(id<MTLDevice> device, double upstream_default);

// The allocator's default high watermark ratio on `device` (MPSStoragePolicy.h rule 8).
TORCH_API double defaultHighWatermarkRatio(id<MTLDevice> device, double upstream_default);

} // namespace at::mps
#endif
