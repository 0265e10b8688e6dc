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
#include <ATen/mps/MPSDevice.h>
#if INTELMAC_TEST_POOL_SELECTION
#undef private
#endif
#include <fake_metal.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

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

// The device singleton, on every line: MPSHeapStorage.mm's checkStreamCanBeCurrent reads it
// (no test here calls that; test_guard_streams.py does), and 2.6.0's init_allocator too.
namespace at::mps {
MPSDevice* MPSDevice::_device = nullptr;
MPSDevice::MPSDevice() : _mtl_device(nil) {}
MPSDevice::~MPSDevice() {}
MPSDevice* MPSDevice::getInstance() {
  static MPSDevice device;
  return &device;
}
} // namespace at::mps

#if INTELMAC_TEST_POOL_SELECTION
// Upstream's MPSHeapAllocatorImpl::init_allocator, init_buffer_pools, get_pool,
// get_allocation_size, the watermark setters and format_size, cut verbatim at test time
// from the exact 2.6.0 MPSAllocator.mm with the series applied (build.py), and the
// stand-ins they need: the stream and the event pool (the
// constructor only stores those two), and emptyCache (the destructor's; the tests
// release their own buffers).
namespace at::mps {
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

#if INTELMAC_TEST_PLACEMENT
namespace {
// The current stream of the block-life allocator below (an opaque pointer, as upstream
// compares streams) and the default one: life_alloc's stream 0.
at::mps::MPSStream* const kDefaultStream = reinterpret_cast<at::mps::MPSStream*>(uintptr_t{0x1000});
at::mps::MPSStream* g_current_stream = kDefaultStream;
} // namespace

// What the series' lines cut from the patch (alloc_front.inc) call for the streams.
namespace at::mps {
MPSStream* getCurrentMPSStream() {
  return g_current_stream;
}
MPSStream* getDefaultMPSStream() {
  return kDefaultStream;
}
} // namespace at::mps

namespace {
using at::mps::getCurrentMPSStream;
using at::mps::getDefaultMPSStream;

// The front of 2.14.1/2.15.0's MPSHeapAllocatorImpl::alloc_buffer_block, where a request
// gets its pool and its size, with the members it uses. The front itself
// (alloc_front.inc) is the series' own text, cut at build time from the line's patched
// hunk (alloc_build.alloc_buffer_block_front), so it runs as the series leaves it. The
// members are mirrors, in our words, of the dated candidate of the line's MPSAllocator.mm
// (docs/mps-device-policy.md): init_buffer_pools' three pools, get_pool and
// get_allocation_size. The pools are the header's BufferPool (exact, with poolUsage()).
struct AllocatorFront {
  id<MTLDevice> m_device;
  size_t m_max_buffer_size;
  BufferPool shared_large, shared_small, scalar;

  explicit AllocatorFront(id<MTLDevice> device)
      : m_device(device),
        m_max_buffer_size([device maxBufferLength]),
        shared_large(device, UsageFlags::SHARED | UsageFlags::HAZARD),
        shared_small(device, UsageFlags::SMALL | UsageFlags::SHARED | UsageFlags::HAZARD),
        scalar(device, UsageFlags::SMALL | UsageFlags::SHARED | UsageFlags::SCALAR) {}

  // Scalars to the scalar pool, then by size: at most kMaxSmallAlloc to the small pool.
  BufferPool& get_pool(size_t /*requested_size*/, size_t aligned_size, uint32_t usage) {
    if (usage & UsageFlags::SCALAR) {
      return scalar;
    }
    return aligned_size <= kMaxSmallAlloc ? shared_small : shared_large;
  }

  // Metal's heap size for the usage's options, rounded to Metal's alignment; a large
  // request (not a scalar) is rounded further, to 1/32 of its power of two and at least a
  // page, unless that moves it to another heap tier or past the buffer limit.
  size_t get_allocation_size(size_t size, uint32_t usage) const {
    const MTLSizeAndAlign metal = [m_device heapBufferSizeAndAlignWithLength:size options:HeapBlock::getOptions(usage)];
    const size_t aligned = BufferBlock::alignUp(metal.size, metal.align);
    if ((usage & UsageFlags::SCALAR) || aligned <= kMaxSmallAlloc) {
      return aligned;
    }
    const size_t granule = std::max<size_t>((size_t(1) << (63 - __builtin_clzll(aligned))) >> 5, vm_page_size);
    const size_t bucketed = BufferBlock::alignUp(aligned, granule);
    if (bucketed >= m_max_buffer_size || getHeapTier(bucketed, false) != getHeapTier(aligned, false)) {
      return aligned;
    }
    return bucketed;
  }

  // alloc_buffer_block up to its AllocParams, as the series leaves it.
  BufferPool& front(size_t size, uint32_t usage, bool allow_in_flight_reuse, size_t& size_out) {
#include "alloc_front.inc"
    size_out = alloc_size;
    return pool;
  }
};


// The life of blocks in one allocator (issue 35): mirrors, in our words, of the dated
// candidate's alloc_heap, split_free_block, merge_free_blocks/coalesce_free_blocks,
// get_free_buffer, free_buffer, release_free_heaps and alloc_buffer_block's retries up to
// its out-of-memory check (release lines 183-516 of 2.15.0, 183-482 of 2.14.1:
// docs/mps-device-policy.md), over the exact header's BufferPool, HeapBlock and BufferBlock
// with the series' hooks (poolUsage, poolMinSplit, newAllocatorHeap). The series' own lines
// in MPSAllocator.mm run as the series leaves them, cut from the line's patch at build time
// (alloc_build): the front of alloc_buffer_block (alloc_front.inc), split_free_block's
// guard (split_guard.inc) and the line coalesce_free_blocks returns with
// (coalesce_return.inc). The stream is an opaque pointer, as upstream compares it.
struct BlockLife {
  AllocatorFront front;
  id<MTLDevice> device;
  size_t max_total;        // m_max_total_allowed_size: the high watermark ratio times the working set
  size_t heaps_total = 0;  // m_total_allocated_memory: the sizes of the pools' heaps
  int nil_placements = 0;  // where upstream's TORCH_INTERNAL_ASSERT(block->buffer) fires
  std::string refused;     // the last error alloc_buffer_block raised (TORCH_CHECK)
  std::vector<BufferBlock*> live;
  std::vector<size_t> asked; // the size each live block was allocated for (params.size())

  // The part of AllocParams these members read and write.
  struct Params {
    size_t alloc_size;
    BufferPool* pool;
    BufferBlock* buffer_block = nullptr;
    size_t size() const {
      return alloc_size;
    }
  };

  BlockLife(id<MTLDevice> d, double high_watermark_ratio)
      : front(d),
        device(d),
        max_total(static_cast<size_t>(high_watermark_ratio * (double)[d recommendedMaxWorkingSetSize])) {}

  size_t device_allocated() const {
    return [device currentAllocatedSize];
  }
  bool idle(BufferBlock* b) const {
    return b->buffer == nil || [b->buffer retainCount] <= 1;
  }
  void place(BufferPool& pool, BufferBlock* b) {
    b->buffer = b->heap->newMTLBuffer(b->size, pool.usage, b->offset);
    nil_placements += b->buffer == nil;
    b->stream = getCurrentMPSStream();
  }
  void unplace(BufferBlock* b) {
    if (b->buffer != nil) {
      b->heap->releaseMTLBuffer(b->buffer);
    }
    b->stream = nullptr;
  }

  // split_free_block: a block of params.size() cut from the free block `block`; a remainder
  // of at least min_split stays free, and the buffer is placed again when the range changes
  // or changes stream. nullptr: the series' guard refused the block, before any change.
  BufferBlock* split(Params& params, BufferBlock* block) {
    BufferPool& pool = *params.pool;
    HeapBlock* heap = block->heap;
    const size_t block_size = block->size;
    const size_t alloc_size = params.size();
#include "split_guard.inc"
    pool.available_buffers.erase(block);
    pool.available_size -= block_size;
    heap->free_bytes -= block_size;
    const size_t rest = block_size - alloc_size;
    if (rest >= pool.min_split || block->stream != getCurrentMPSStream()) {
      unplace(block);
    }
    if (rest >= pool.min_split) {
      auto* remainder = new BufferBlock(rest, block->offset + alloc_size, heap);
      remainder->next = block->next;
      block->next = remainder;
      block->size = alloc_size;
      pool.available_buffers.insert(remainder);
      pool.available_size += rest;
      heap->free_bytes += rest;
    }
    if (block->buffer == nil) {
      place(pool, block);
    }
    heap->max_free_run = std::min(heap->max_free_run, heap->free_bytes);
    return block;
  }

  BufferBlock* merge(BufferPool& pool, BufferBlock* first, BufferBlock* last) {
    if (first == last) {
      return first;
    }
    BufferBlock* after = last->next;
    pool.available_buffers.erase(first);
    unplace(first);
    size_t merged = first->size;
    for (BufferBlock* b = first->next; b != after;) {
      BufferBlock* next = b->next;
      pool.available_buffers.erase(b);
      unplace(b);
      merged += b->size;
      delete b;
      b = next;
    }
    first->size = merged;
    first->next = after;
    pool.available_buffers.insert(first);
    return first;
  }

  bool coalesce(Params& params) {
    BufferPool& pool = *params.pool;
    const size_t alloc_size = params.size();
    for (HeapBlock* heap : pool.heaps) {
      if (heap->max_free_run < alloc_size) {
        continue;
      }
      size_t largest = 0, run = 0, merge_run = 0;
      BufferBlock* first = nullptr;
      for (BufferBlock* b = heap->first_block; b != nullptr; b = b->next) {
        if (b->in_use) {
          run = merge_run = 0;
          first = nullptr;
          continue;
        }
        run += b->size;
        largest = std::max(largest, run);
        if (!idle(b)) {
          merge_run = 0;
          first = nullptr;
          continue;
        }
        first = first != nullptr ? first : b;
        merge_run += b->size;
        if (merge_run >= alloc_size) {
          params.buffer_block = split(params, merge(pool, first, b));
#include "coalesce_return.inc"
        }
      }
      heap->max_free_run = largest;
    }
    return false;
  }

  // get_free_buffer: the smallest of this stream's cached blocks that fits without leaving
  // a split-worthy remainder, else the smallest of any stream whose range no command buffer
  // holds, else adjacent free ranges merged; each time only if split_free_block takes it.
  bool get_free(Params& params, bool in_flight_ok) {
    if (device_allocated() + params.size() > max_total) {
      return false;
    }
    BufferPool& pool = *params.pool;
    const size_t size = params.size();
    BufferBlock key(size);
    for (auto it = pool.available_buffers.lower_bound(&key); it != pool.available_buffers.end(); ++it) {
      BufferBlock* b = *it;
      if (b->stream != getCurrentMPSStream()) {
        continue;
      }
      if (b->buffer != nil && b->size - size < pool.min_split && (in_flight_ok || [b->buffer retainCount] == 1)) {
        params.buffer_block = split(params, b);
      }
      break;
    }
    if (params.buffer_block == nullptr) {
      auto it = pool.available_buffers.lower_bound(&key);
      if (it != pool.available_buffers.end() && idle(*it)) {
        params.buffer_block = split(params, *it);
      }
    }
    return params.buffer_block != nullptr || coalesce(params);
  }

  bool alloc_heap(Params& params, size_t requested, bool ordered) {
    if (device_allocated() + params.size() > max_total) {
      return false;
    }
    BufferPool& pool = *params.pool;
    AllocParams upstream_params(params.size(), requested, &pool, ordered);
    HeapBlock* heap = HeapBlock::createHeapBlock(upstream_params, device, pool.usage);
    if (heap == nullptr) {
      return false;
    }
    heaps_total += heap->total_size;
    pool.heaps.insert(heap);
    auto* block = new BufferBlock(heap->total_size, 0, heap);
    heap->first_block = block;
    pool.available_buffers.insert(block);
    pool.available_size += heap->total_size;
    params.buffer_block = split(params, block);
    return true;
  }

  // Whole free heaps, oldest first, until `target` bytes are given back.
  size_t release_free_heaps(BufferPool& pool, size_t target = SIZE_MAX) {
    std::vector<HeapBlock*> free_heaps;
    size_t chosen = 0;
    for (HeapBlock* heap : pool.heaps) {
      if (chosen >= target) {
        break;
      }
      bool releasable = heap->free_bytes == heap->total_size;
      for (BufferBlock* b = heap->first_block; releasable && b != nullptr; b = b->next) {
        releasable = idle(b);
      }
      if (releasable) {
        free_heaps.push_back(heap);
        chosen += heap->total_size;
      }
    }
    size_t released = 0;
    for (HeapBlock* heap : free_heaps) {
      for (BufferBlock* b = heap->first_block; b != nullptr;) {
        BufferBlock* next = b->next;
        pool.available_buffers.erase(b);
        pool.available_size -= b->size;
        unplace(b);
        delete b;
        b = next;
      }
      heap->first_block = nullptr;
      pool.heaps.erase(heap);
      heaps_total -= heap->total_size;
      released += heap->total_size;
      heap->releaseMTLHeap();
      delete heap;
    }
    return released;
  }

  size_t release_all() {
    return release_free_heaps(front.shared_large) + release_free_heaps(front.shared_small) +
        release_free_heaps(front.scalar);
  }

  // alloc_buffer_block: the cache, a new heap, the pool's free heaps given back, every
  // pool's, then out of memory. -1: out of memory; -2: a placement came back nil; -3: the
  // allocator raised (refused, the error in `refused`).
  int alloc(size_t size, uint32_t usage, bool ordered) {
    size_t alloc_size = 0;
    BufferPool* chosen = nullptr;
    try {
      chosen = &front.front(size, usage, ordered, alloc_size);
    } catch (const c10::Error& error) {
      refused = error.what_without_backtrace();
      return -3;
    }
    BufferPool& pool = *chosen;
    const int nil_before = nil_placements;
    Params params{alloc_size, &pool};
    bool found = get_free(params, ordered);
    found = found || alloc_heap(params, size, ordered);
    found = found || (release_free_heaps(pool, alloc_size) > 0 && alloc_heap(params, size, ordered));
    if (!found) {
      release_all();
      found = get_free(params, ordered) || alloc_heap(params, size, ordered);
    }
    if (nil_placements != nil_before) {
      return -2;
    }
    BufferBlock* b = params.buffer_block;
    if (!found || b == nullptr) {
      return -1;
    }
    b->in_use = true;
    b->requested_size = size;
    live.push_back(b);
    asked.push_back(alloc_size);
    return static_cast<int>(live.size()) - 1;
  }

  void free(int handle) {
    BufferBlock* b = live.at(handle);
    live[handle] = nullptr;
    BufferPool& pool = *b->heap->pool;
    b->in_use = false;
    pool.available_buffers.insert(b);
    pool.available_size += b->size;
    b->heap->free_bytes += b->size;
    b->heap->max_free_run = b->heap->free_bytes;
  }
};

BlockLife* g_life = nullptr;
} // namespace
#endif

extern "C" {

#if INTELMAC_TEST_PLACEMENT
// Requests of `sizes` (`usage` as malloc/malloc_host/allocScalarBufferWithValue pass it)
// through the front of alloc_buffer_block, then placed one after the other from the start
// of one heap of their pool, as alloc_heap and split_free_block place blocks: the first
// block of a new heap at offset 0, each next one where the previous block ends. The heap
// and the buffers are the header's (createHeapBlock, newMTLBuffer with the offset).
const char* alloc_place_requests(uint64_t registry_id, uint32_t usage, const uint64_t* sizes, int count,
                                 int stream_ordered) {
  @autoreleasepool {
    id<MTLDevice> device = find_device(registry_id);
    if (device == nil || count < 1) {
      return give("{\"error\": \"no such device or no request\"}");
    }
    AllocatorFront allocator(device);
    std::vector<size_t> alloc_sizes;
    BufferPool* pool = nullptr;
    for (int i = 0; i < count; ++i) {
      size_t alloc_size = 0;
      BufferPool& chosen = allocator.front(sizes[i], usage, stream_ordered != 0, alloc_size);
      if (pool != nullptr && pool != &chosen) {
        return give("{\"error\": \"the requests reach different pools\"}");
      }
      pool = &chosen;
      alloc_sizes.push_back(alloc_size);
    }
    size_t total = 0;
    for (size_t s : alloc_sizes) {
      total += s;
    }
    AllocParams params(total, total, pool, stream_ordered != 0);
    HeapBlock* heap = HeapBlock::createHeapBlock(params, device, pool->usage);
    std::string json = "{\"pool_usage\": " + std::to_string(pool->usage) +
        ", \"pool_alignment\": " + std::to_string(pool->alignment) + ", \"placements\": [";
    if (heap == nullptr) {
      return give(json + "], \"heap\": null}");
    }
    std::vector<id<MTLBuffer>> buffers;
    size_t offset = 0;
    for (size_t i = 0; i < alloc_sizes.size(); ++i) {
      id<MTLBuffer> buffer = heap->newMTLBuffer(alloc_sizes[i], pool->usage, offset);
      json += std::string(i ? ", " : "") + "{\"alloc_size\": " + std::to_string(alloc_sizes[i]) +
          ", \"offset\": " + std::to_string(offset) + ", \"buffer\": " + flag(buffer != nil) + "}";
      if (buffer != nil) {
        buffers.push_back(buffer);
      }
      offset += alloc_sizes[i];
    }
    json += "], \"heap_size\": " + std::to_string(heap_total(heap)) + "}";
    for (id<MTLBuffer>& buffer : buffers) {
      heap->releaseMTLBuffer(buffer);
    }
    heap->releaseMTLHeap();
    delete heap;
    return give(json);
  }
}
#endif

#if INTELMAC_TEST_PLACEMENT
// The block-life allocator on `registry_id`'s device (BlockLife), its high watermark ratio
// the series' default there (defaultHighWatermarkRatio of upstream's 1.7, as init_allocator
// with patch 0009 asks it).
void life_begin(uint64_t registry_id) {
  @autoreleasepool {
    id<MTLDevice> device = find_device(registry_id);
    delete g_life;
    g_life = new BlockLife(device, at::mps::defaultHighWatermarkRatio(device, 1.7));
  }
}

// A request on stream `stream` (an opaque id): its handle, -1 out of memory, -2 a nil placement.
// -3: the allocator refused it (life_refused says why).
int life_alloc(uint64_t size, uint32_t usage, int stream_ordered, int stream) {
  @autoreleasepool {
    g_current_stream = reinterpret_cast<at::mps::MPSStream*>(static_cast<uintptr_t>(0x1000 + stream));
    const int handle = g_life->alloc(size, usage, stream_ordered != 0);
    g_current_stream = kDefaultStream;
    return handle;
  }
}

const char* life_refused() {
  return give(g_life->refused);
}

void life_free(int handle) {
  g_life->free(handle);
}

// What the allocator counts against what the device holds.
const char* life_stats() {
  std::string json = "{\"heaps_total\": " + std::to_string(g_life->heaps_total) +
      ", \"device_allocated\": " + std::to_string(g_life->device_allocated()) +
      ", \"max_total\": " + std::to_string(g_life->max_total) +
      ", \"nil_placements\": " + std::to_string(g_life->nil_placements) +
      ", \"scalar_min_split\": " + std::to_string(g_life->front.scalar.min_split) + ", \"live\": [";
  // each block still held: its size and the size it was allocated for
  bool first = true;
  for (size_t i = 0; i < g_life->live.size(); ++i) {
    if (g_life->live[i] != nullptr) {
      json += std::string(first ? "" : ", ") + "[" + std::to_string(g_life->live[i]->size) + ", " +
          std::to_string(g_life->asked[i]) + "]";
      first = false;
    }
  }
  json += "]}";
  return give(json);
}

// Frees what is still held, gives every heap back, ends the allocator.
void life_end() {
  @autoreleasepool {
    for (size_t i = 0; i < g_life->live.size(); ++i) {
      if (g_life->live[i] != nullptr) {
        g_life->free(static_cast<int>(i));
      }
    }
    g_life->release_all();
  }
}
#endif

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

double alloc_default_high_watermark(uint64_t registry_id, double upstream_default) {
  @autoreleasepool {
    return at::mps::defaultHighWatermarkRatio(find_device(registry_id), upstream_default);
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
