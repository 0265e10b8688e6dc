// MPSHeapStorage.mm: the Objective-C++ shell around MPSStoragePolicy.h.
// Added by the intelmac-torch patch series (0008-mps-allocator-storage).
//
// ATen's CMakeLists compiles every aten/src/ATen/mps/*.mm, so this file needs
// no build change. It reads two facts about the device, asks MPSStoragePolicy.h
// what to do, and does it. The hooks of patch 0009 in upstream's
// MPSAllocator.h (and, on 2.14.1 and 2.15.0, MPSAllocator.mm) call it.
//
// Apple's documentation this relies on, in our words:
// - MTLHeapDescriptor.storageMode: on a Mac GPU that is not Apple silicon a
//   heap can only be private; a shared or managed descriptor gets no heap.
// - MTLDevice newBufferWithLength:options: makes a standalone buffer; shared
//   and managed storage are available for buffers on every Mac GPU (shared:
//   one copy in system memory, which a discrete GPU reads over PCIe). That is
//   what the storageModeShared and "Setting resource storage modes" pages say;
//   "Choosing a resource storage mode for Intel and AMD GPUs" says shared
//   resources exist only with integrated graphics (MPSStoragePolicy.h has the
//   conflict; a real AMD GPU decides it). A buffer Metal refuses is nil here,
//   and upstream's allocator sees it as memory it could not get.
// - MTLBuffer.contents is the CPU's pointer to a buffer's memory; it is NULL
//   for private storage, which only the GPU (a blit) may touch.
// - A command buffer made by -[MTLCommandQueue commandBuffer] (what
//   MPSCommandBuffer's commandBufferFromCommandQueue: wraps) keeps strong
//   references to the resources it encodes until it completes. Upstream's
//   allocator relies on that (retainCount > 1 means "still in flight"), and so
//   does a standalone buffer here: released by the allocator, it lives until
//   the last command buffer using it completes.
#include <ATen/mps/MPSHeapStorage.h>

#include <ATen/mps/MPSDevice.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

MTLStorageMode metal_storage(at::mps::storage::Storage storage) {
  using at::mps::storage::Storage;
  switch (storage) {
    case Storage::shared:
      return MTLStorageModeShared;
    case Storage::managed:
      return MTLStorageModeManaged;
    case Storage::private_:
      return MTLStorageModePrivate;
  }
  return MTLStorageModePrivate;
}

at::mps::storage::Storage policy_storage(MTLStorageMode mode) {
  using at::mps::storage::Storage;
  switch (mode) {
    case MTLStorageModeShared:
      return Storage::shared;
    case MTLStorageModeManaged:
      return Storage::managed;
    default: // private, memoryless: no CPU access
      return Storage::private_;
  }
}

MTLResourceOptions with_storage(MTLResourceOptions options, MTLStorageMode mode) {
  const MTLResourceOptions mask = static_cast<MTLResourceOptions>(0xF) << MTLResourceStorageModeShift;
  return (options & ~mask) | (static_cast<MTLResourceOptions>(mode) << MTLResourceStorageModeShift);
}

} // namespace

// What upstream's allocator keeps in place of a CPU-visible heap on a GPU that
// cannot have one. It answers the heap messages that the allocator of every
// supported line sends (those the 2.6.0 to 2.15.0 binaries name:
// newBufferWithLength:options:[offset:], maxAvailableSizeWithAlignment:,
// setPurgeableState:, size; no useHeap:, no aliasing) and is never handed to
// Metal itself. It is one standalone Metal buffer of the request's size, made
// with the heap, so that
// - the allocator's accounting (heap sizes) is the memory Metal gave it, and
// - a buffer Metal refuses is a heap that could not be made, where upstream
//   releases its cache and retries; a heap that exists never refuses a buffer
//   (upstream asserts that: TORCH_INTERNAL_ASSERT(buffer) after newMTLBuffer).
// The first buffer asked of it is that one (2.6.0 and 2.9.1 then see the heap
// full, and reuse the block itself). Lines with placement heaps (2.14.1 on)
// may place a buffer again in the range once it was freed: that one is a new
// standalone buffer, no larger than the heap. Reuse of the buffers stays with
// upstream's pools, which return a block only after its command buffers
// completed (free_buffer from completion handlers, retainCount checks).
@interface IntelmacStandaloneHeap : NSObject {
 @private
  id<MTLDevice> _device;
  id<MTLBuffer> _first; // the buffer made with the heap, until it is handed out
  NSUInteger _size;
  MTLStorageMode _storageMode;
  MTLCPUCacheMode _cpuCacheMode;
  MTLHazardTrackingMode _hazardTrackingMode;
  MTLResourceOptions _resourceOptions;
  MTLHeapType _type;
  MTLPurgeableState _purgeableState;
}
- (instancetype)initWithDevice:(id<MTLDevice>)device
                    descriptor:(MTLHeapDescriptor*)descriptor
                   storageMode:(MTLStorageMode)storageMode
                          size:(NSUInteger)size;
@end

@implementation IntelmacStandaloneHeap

- (instancetype)initWithDevice:(id<MTLDevice>)device
                    descriptor:(MTLHeapDescriptor*)descriptor
                   storageMode:(MTLStorageMode)storageMode
                          size:(NSUInteger)size {
  self = [super init];
  if (self) {
    _device = [device retain];
    _size = size;
    _storageMode = storageMode;
    _cpuCacheMode = descriptor.cpuCacheMode;
    _hazardTrackingMode = descriptor.hazardTrackingMode;
    _resourceOptions = with_storage(descriptor.resourceOptions, storageMode);
    _type = descriptor.type;
    _purgeableState = MTLPurgeableStateNonVolatile;
    _first = [_device newBufferWithLength:size options:_resourceOptions];
    if (_first == nil) { // Metal refused the memory: no heap, as newHeapWithDescriptor: would say
      [self release];
      return nil;
    }
  }
  return self;
}

- (void)dealloc {
  [_first release];
  [_device release];
  [super dealloc];
}

- (id<MTLDevice>)device {
  return _device;
}

- (NSUInteger)size {
  return _size;
}

// The buffers are the device's allocations, not the heap's.
- (NSUInteger)usedSize {
  return 0;
}

- (NSUInteger)currentAllocatedSize {
  return 0;
}

// The whole heap until its buffer is handed out, then nothing (upstream's pools
// reuse the block itself). The buffer starts at offset 0, which every alignment
// allows, so a heap smaller than the alignment (a 256-byte scalar's, against
// 2.6.0's vm_page_size) still counts its bytes.
- (NSUInteger)maxAvailableSizeWithAlignment:(NSUInteger)alignment {
  (void)alignment;
  return _first != nil ? _size : 0;
}

- (MTLStorageMode)storageMode {
  return _storageMode;
}

- (MTLCPUCacheMode)cpuCacheMode {
  return _cpuCacheMode;
}

- (MTLHazardTrackingMode)hazardTrackingMode {
  return _hazardTrackingMode;
}

- (MTLResourceOptions)resourceOptions {
  return _resourceOptions;
}

- (MTLHeapType)type {
  return _type;
}

- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state {
  const MTLPurgeableState previous = _purgeableState;
  if (state != MTLPurgeableStateKeepCurrent) {
    _purgeableState = state;
  }
  return previous;
}

- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  if (length > _size) {
    return nil; // as a heap says when a buffer does not fit
  }
  if (_first != nil && length == [_first length]) {
    id<MTLBuffer> buffer = _first; // the caller owns it now, as a result of newBuffer...
    _first = nil;
    return buffer;
  }
  return [_device newBufferWithLength:length options:with_storage(options, _storageMode)];
}

- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options offset:(NSUInteger)offset {
  (void)offset; // the allocator's own bookkeeping of the heap's range
  return [self newBufferWithLength:length options:options];
}

@end

namespace at::mps {

bool isAppleGPU(id<MTLDevice> device) {
  return [device supportsFamily:MTLGPUFamilyApple1];
}

// Asked of Metal once per device: requestUsage() runs on every allocation, and
// neither fact changes while the device exists. The cache keeps each device it
// has seen (one retain; MPSDevice keeps its device for the life of the process
// anyway), so that no other device can later have the same address.
storage::Gpu storageGpu(id<MTLDevice> device) {
  static std::mutex mutex;
  static std::vector<std::pair<const void*, storage::Gpu>> known;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [seen, gpu] : known) {
    if (seen == (const void*)device) {
      return gpu;
    }
  }
  storage::Gpu gpu;
  gpu.apple_gpu = isAppleGPU(device);
  gpu.unified_memory = [device hasUnifiedMemory];
  known.emplace_back((const void*)[device retain], gpu);
  return gpu;
}

id<MTLHeap> newAllocatorHeap(id<MTLDevice> device, MTLHeapDescriptor* descriptor, size_t request_size) {
  const storage::HeapPlan plan =
      storage::plan_heap(storageGpu(device), policy_storage(descriptor.storageMode), descriptor.size, request_size);
  if (plan.placement == storage::Placement::standalone) {
    IntelmacStandaloneHeap* heap = [[IntelmacStandaloneHeap alloc] initWithDevice:device
                                                                       descriptor:descriptor
                                                                      storageMode:metal_storage(plan.storage)
                                                                             size:plan.heap_size];
    return (id<MTLHeap>)(id)heap;
  }
  if (plan.heap_size != descriptor.size) {
    descriptor.size = plan.heap_size;
  }
  return [device newHeapWithDescriptor:descriptor];
}

double defaultLowWatermarkRatio(id<MTLDevice> device, double upstream_default) {
  return storage::default_low_watermark_ratio(storageGpu(device), upstream_default);
}

double defaultHighWatermarkRatio(id<MTLDevice> device, double upstream_default) {
  return storage::default_high_watermark_ratio(storageGpu(device), upstream_default);
}

void checkAllocationStream(id<MTLDevice> device, bool on_default_stream) {
  if (on_default_stream) {
    return; // every allocation but those of a second stream: no device fact needed
  }
  TORCH_CHECK(storage::stream_may_allocate(storageGpu(device), on_default_stream),
              storage::stream_refused_message(std::string([[device name] UTF8String])));
}

void checkStreamCanBeCurrent(int64_t stream_id, int64_t default_stream_id) {
  if (stream_id == default_stream_id) {
    return; // the default stream is current again (a guard's restore, too): no device needed
  }
  id<MTLDevice> device = MPSDevice::getInstance()->device();
  if (device == nil) {
    return; // no MPS device: upstream's own checks refuse the stream
  }
  TORCH_CHECK(storage::stream_may_become_current(storageGpu(device), stream_id, default_stream_id),
              storage::stream_refused_message(std::string([[device name] UTF8String])));
}

} // namespace at::mps
