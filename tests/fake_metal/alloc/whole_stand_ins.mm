// whole_stand_ins.mm: what upstream's whole MPSAllocator.mm needs besides Metal, in our own
// small versions, and C entry points that drive the allocator through its public interface
// (IMPSAllocator). test_whole_allocator.py builds it with the exact 2.6.0 MPSAllocator.mm,
// the series applied, and our MPSHeapStorage.mm, against the stand-in Metal.
//
// The stand-ins, and what they keep of upstream's behaviour:
// - MPSDevice: the stand-in device whose registry id whole_init() names.
// - MPSStream: one default stream over a stand-in command queue. addCompletedHandler()
//   adds the handler to the stream's current command buffer, as upstream's does;
//   synchronize() commits it and waits. Completed command buffers run their handlers on a
//   thread of their own, as Metal does (upstream's handlers take the allocator's mutex).
// - dispatch_sync: a serial queue per stream; a dispatch_sync onto the queue the caller is
//   already running on deadlocks in libdispatch, so it is counted (whole_stats) and run.
// - MPSEvent and the event pool: record and synchronize complete at once (the tests do not
//   use torch.mps events; upstream's recordEvents/waitForEvents only need them to exist).
#include <ATen/mps/MPSAllocator.h>
#include <ATen/mps/MPSAllocatorInterface.h>
#include <ATen/mps/MPSDevice.h>
#include <ATen/mps/MPSEvent.h>
#include <ATen/mps/MPSStream.h>
#include <c10/util/Exception.h>
#include <fake_metal.h>

#include "json_text.h"
#include "device_stand_in.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace {

uint64_t& chosen_registry_id() {
  static uint64_t id = 0;
  return id;
}

struct SerialQueue {
  std::mutex mutex;
};

thread_local SerialQueue* current_queue = nullptr;
std::atomic<int> g_dispatch_deadlocks{0};
id<MTLCommandBuffer> g_command_buffer = nil; // the default stream's open command buffer

id<MTLCommandQueue> stream_queue(at::mps::MPSStream* stream) {
  return (id<MTLCommandQueue>)stream->commandQueue();
}

// Commits the open command buffer (if any) and completes every committed one, on a thread
// of its own: Metal runs completion handlers on its threads, never on the caller's.
void commit_and_wait(at::mps::MPSStream* stream) {
  if (g_command_buffer != nil) {
    [g_command_buffer commit];
    [g_command_buffer release];
    g_command_buffer = nil;
  }
  std::thread completion([] {
    @autoreleasepool {
      fake_metal_complete_command_buffers();
    }
  });
  completion.join();
  (void)stream;
}

} // namespace

extern "C" void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block) {
  auto* serial = reinterpret_cast<SerialQueue*>(queue);
  if (current_queue == serial) {
    ++g_dispatch_deadlocks; // libdispatch would never return
    block();
    return;
  }
  std::lock_guard<std::mutex> lock(serial->mutex);
  SerialQueue* outer = current_queue;
  current_queue = serial;
  block();
  current_queue = outer;
}

// the stand-in device whose registry id whole_init() names
id<MTLDevice> intelmac_test::stand_in_device() {
  NSArray* devices = [MTLCopyAllDevices() autorelease];
  for (NSUInteger i = 0; i < [devices count]; ++i) {
    id<MTLDevice> device = [devices objectAtIndex:i];
    if ([device registryID] == chosen_registry_id()) {
      return device;
    }
  }
  return nil;
}

namespace at::mps {

MPSStream::MPSStream(Stream stream) : _stream(stream) {
  _commandQueue = [MPSDevice::getInstance()->device() newCommandQueue];
  _serialQueue = reinterpret_cast<dispatch_queue_t>(new SerialQueue());
}

MPSStream::~MPSStream() {
  [_commandQueue release];
  delete reinterpret_cast<SerialQueue*>(_serialQueue);
}

void MPSStream::addCompletedHandler(MTLCommandBufferHandler block) {
  dispatch_sync(_serialQueue, ^() {
    if (g_command_buffer == nil) {
      g_command_buffer = [[stream_queue(this) commandBuffer] retain];
    }
    [g_command_buffer addCompletedHandler:block];
  });
}

void MPSStream::synchronize(SyncType syncType) {
  (void)syncType; // every kind ends with the work done, for the allocator's purposes
  commit_and_wait(this);
}

MPSStream* getDefaultMPSStream() {
  static MPSStream stream(Stream(Stream::UNSAFE, c10::Device(DeviceType::MPS, 0), 0));
  return &stream;
}

MPSEvent::MPSEvent(id_t ID, MPSStream* stream, bool enable_timing)
    : m_id(ID), m_enable_timing(enable_timing), m_stream(stream) {}

MPSEvent::~MPSEvent() = default;

void MPSEvent::record(bool needsLock, bool syncEvent) {
  (void)needsLock;
  (void)syncEvent;
  ++m_signalCounter;
}

bool MPSEvent::synchronize() {
  commit_and_wait(m_stream);
  return true;
}

MPSEventPool::MPSEventPool(MPSStream* default_stream) : m_default_stream(default_stream) {
  m_default_deleter = [](MPSEvent* event) { delete event; };
}

MPSEventPool::~MPSEventPool() = default;

MPSEventPtr MPSEventPool::acquireEvent(bool enable_timing, MPSStream* stream) {
  return MPSEventPtr(new MPSEvent(++m_event_counter, stream ? stream : m_default_stream, enable_timing),
                     m_default_deleter);
}

std::shared_ptr<MPSEventPool> getMPSEventPool() {
  static auto pool = std::make_shared<MPSEventPool>(getDefaultMPSStream());
  return pool;
}

} // namespace at::mps

namespace {

std::map<int, c10::DataPtr>& live() {
  static std::map<int, c10::DataPtr> blocks;
  return blocks;
}
int g_next_handle = 0;

std::string& out() {
  static std::string text;
  return text;
}

const char* give(const std::string& text) {
  out() = text;
  return out().c_str();
}

using intelmac_test::quoted;

at::mps::IMPSAllocator* allocator(int shared) {
  return at::mps::getIMPSAllocator(shared != 0);
}

} // namespace

#if INTELMAC_WHOLE_PINNED_HOOK
namespace at::mps {
// MPSHooks::getPinnedMemoryAllocator's body as the series leaves it (alloc_build.pinned_memory_hook)
c10::Allocator* intelmac_whole_pinned_memory_allocator();
} // namespace at::mps
#endif

extern "C" {

const char* whole_alloc_in_pool(int kind, uint64_t size);

void whole_init(uint64_t registry_id) {
  chosen_registry_id() = registry_id;
}

// {"handle": n, "buffer": bool, "storage": ..., "length": ...} or {"error": message}.
// kind: 0 a device tensor (private allocator), 1 pinned memory (shared allocator),
// 2 a scalar (allocScalarBufferWithValue with an 8-byte value).
const char* whole_alloc(int kind, uint64_t size) {
  @autoreleasepool {
    return whole_alloc_in_pool(kind, size);
  }
}

const char* whole_alloc_in_pool(int kind, uint64_t size) {
  try {
    c10::DataPtr ptr;
    if (kind == 2) {
      uint64_t value = 0x0123456789abcdefULL;
      ptr = allocator(0)->allocScalarBufferWithValue(&value, size);
    } else {
      at::mps::IMPSAllocator* chosen = allocator(kind == 1);
      if (chosen == nullptr) {
        return give("{\"error\": \"no shared allocator on this device\"}");
      }
      ptr = chosen->allocate(size);
    }
    id<MTLBuffer> buffer = (id<MTLBuffer>)ptr.get();
    std::ostringstream os;
    const int handle = ++g_next_handle;
    os << "{\"handle\": " << handle << ", \"buffer\": " << (buffer != nil ? "true" : "false")
       << ", \"storage\": " << quoted(fake_metal_storage_name(static_cast<unsigned>([buffer storageMode])))
       << ", \"length\": " << [buffer length] << "}";
    live()[handle] = std::move(ptr);
    return give(os.str());
  } catch (const c10::Error& e) {
    return give("{\"error\": " + quoted(e.what_without_backtrace()) + "}");
  }
}

#if INTELMAC_WHOLE_PINNED_HOOK
// What tensor.pin_memory() gets from MPSHooks::getPinnedMemoryAllocator:
// {"allocator": "shared"} (the shared allocator), {"allocator": null} or {"error": message}.
const char* whole_pinned_memory_allocator() {
  try {
    c10::Allocator* got = at::mps::intelmac_whole_pinned_memory_allocator();
    if (got == nullptr) {
      return give("{\"allocator\": null}");
    }
    return give(got == allocator(1) ? "{\"allocator\": \"shared\"}" : "{\"allocator\": \"other\"}");
  } catch (const c10::Error& e) {
    return give("{\"error\": " + quoted(e.what_without_backtrace()) + "}");
  }
}
#endif

// What tensor.is_pinned() answers for ordinary CPU memory (upstream's isMPSPinnedPtr).
int whole_is_pinned_cpu_memory() {
  std::string ordinary(64, 'x');
  return at::mps::isMPSPinnedPtr(ordinary.data()) ? 1 : 0;
}

// The CPU's view of a live block: shared buffers only (upstream maps them for pinned memory).
int whole_cpu_value_ok(int handle) {
  auto it = live().find(handle);
  if (it == live().end()) {
    return -1;
  }
  id<MTLBuffer> buffer = (id<MTLBuffer>)it->second.get();
  const uint64_t* contents = static_cast<const uint64_t*>([buffer contents]);
  return contents != nullptr && *contents == 0x0123456789abcdefULL;
}

// Releases a block the way a tensor's storage does (the DataPtr's deleter: free()).
int whole_free(int handle) {
  @autoreleasepool {
    return live().erase(handle) == 1;
  }
}

void whole_complete() {
  @autoreleasepool {
    commit_and_wait(at::mps::getDefaultMPSStream());
  }
}

void whole_empty_cache() {
  @autoreleasepool {
    allocator(0)->emptyCache();
  }
}

void whole_set_high_watermark(double ratio) {
  allocator(0)->setHighWatermarkRatio(ratio);
}

const char* whole_stats() {
  at::mps::IMPSAllocator* a = allocator(0);
  std::ostringstream os;
  os << "{\"total_allocated\": " << a->getTotalAllocatedMemory()
     << ", \"current_allocated\": " << a->getCurrentAllocatedMemory()
     << ", \"driver_allocated\": " << a->getDriverAllocatedMemory()
     << ", \"recommended_max\": " << a->getRecommendedMaxMemory()
     << ", \"low_watermark_limit\": " << a->getLowWatermarkLimit()
     << ", \"high_watermark_limit\": " << a->getHighWatermarkLimit()
     << ", \"shared_storage\": " << (a->isSharedStorageSupported() ? "true" : "false")
     << ", \"dispatch_deadlocks\": " << g_dispatch_deadlocks.load() << ", \"live\": " << live().size() << "}";
  return give(os.str());
}

} // extern "C"
