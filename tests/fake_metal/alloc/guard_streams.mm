// guard_streams.mm: 2.15.0's MPSGuardImpl.h, the series applied (patch 0012's hook in
// exchangeStream), run against the stand-in Metal with our compiled MPSHeapStorage.mm.
// test_guard_streams.py builds it into a program and runs it once per pretend GPU (the
// MPSDevice singleton is once per process); it prints one JSON object.
//
// exchangeStream is what `with torch.Stream("mps"):` reaches in C++ (THPStream_enter ->
// at::accelerator::setCurrentStream -> the registered guard's exchangeStream), and
// getNewStream is what torch.Stream("mps") calls. Both are upstream's inline code from the
// exact header; what they call is ours, in small versions:
// - MPSDevice: the stand-in device (the only one configured), as MPSDevice.mm would
//   choose it (test_devices.py runs the real choice);
// - MPSStream's free functions: a default stream (id 0) and a pool of 32 (ids 1-32),
//   made on first use, and a current stream per thread, as upstream's MPSStream.mm
//   describes them (MPSStream.h);
// - MPSGuardImpl's out-of-line members (events, device sync): never called here; each
//   raises if it is.
#include <ATen/mps/MPSDevice.h>
#include <ATen/mps/MPSGuardImpl.h>
#include <ATen/mps/MPSStream.h>
#include <c10/util/Exception.h>

#include "json_text.h"
#include "device_stand_in.h"

#include <array>
#include <cstdio>
#include <string>

// the only device configured
id<MTLDevice> intelmac_test::stand_in_device() {
  NSArray* devices = [MTLCopyAllDevices() autorelease];
  return [devices count] > 0 ? [devices objectAtIndex:0] : nil;
}

namespace at::mps {

MPSStream::MPSStream(Stream stream) : _stream(stream) {}

MPSStream::~MPSStream() = default;

namespace {

constexpr int kPoolStreams = 32;

MPSStream* stream_with_id(int64_t id) {
  static std::array<MPSStream*, kPoolStreams + 1> streams{};
  TORCH_CHECK(id >= 0 && id <= kPoolStreams, "no MPS stream with id ", id);
  if (streams[id] == nullptr) {
    streams[id] = new MPSStream(Stream(Stream::UNSAFE, c10::Device(DeviceType::MPS, 0), id));
  }
  return streams[id];
}

thread_local MPSStream* current_stream = nullptr;
int next_pool_stream = 0;

} // namespace

MPSStream* getDefaultMPSStream() {
  return stream_with_id(0);
}

MPSStream* getCurrentMPSStream() {
  return current_stream != nullptr ? current_stream : getDefaultMPSStream();
}

void setCurrentMPSStream(MPSStream* stream) {
  current_stream = stream;
}

MPSStream* getStreamFromPool() {
  next_pool_stream = next_pool_stream % kPoolStreams + 1;
  return stream_with_id(next_pool_stream);
}

MPSStream* getStreamByID(int64_t stream_id) {
  return stream_with_id(stream_id);
}

[[noreturn]] void not_in_this_test(const char* what) {
  TORCH_CHECK(false, what, " is not part of this test (guard_streams.mm)");
}

void MPSGuardImpl::destroyEvent(void*, const DeviceIndex) const noexcept {}
void MPSGuardImpl::record(void**, const Stream&, const DeviceIndex, const EventFlag) const {
  not_in_this_test("record");
}
void MPSGuardImpl::block(void*, const Stream&) const {
  not_in_this_test("block");
}
bool MPSGuardImpl::queryEvent(void*) const {
  not_in_this_test("queryEvent");
}
void MPSGuardImpl::synchronizeEvent(void*) const {
  not_in_this_test("synchronizeEvent");
}
double MPSGuardImpl::elapsedTime(void*, void*, const DeviceIndex) const {
  not_in_this_test("elapsedTime");
}
void MPSGuardImpl::synchronizeDevice(const DeviceIndex) const {
  not_in_this_test("synchronizeDevice");
}
void MPSGuardImpl::recordDataPtrOnStream(const c10::DataPtr&, const Stream&) const {
  not_in_this_test("recordDataPtrOnStream");
}

} // namespace at::mps

namespace {

using intelmac_test::quoted;

// One exchangeStream: {"to": id, "returned": id} or {"to": id, "error": message}, and the
// current stream's id afterwards.
std::string exchange(const at::mps::MPSGuardImpl& guard, c10::Stream to) {
  std::string out = "{\"to\": " + std::to_string(to.id());
  try {
    const c10::Stream previous = guard.exchangeStream(to);
    out += ", \"returned\": " + std::to_string(previous.id());
  } catch (const c10::Error& e) {
    out += ", \"error\": " + quoted(e.what_without_backtrace());
  }
  return out + ", \"current\": " + std::to_string(at::mps::getCurrentMPSStream()->unwrap().id()) + "}";
}

} // namespace

int main() {
  @autoreleasepool {
    const at::mps::MPSGuardImpl guard;
    const c10::Device mps(c10::DeviceType::MPS, 0);
    const c10::Stream default_stream = guard.getDefaultStream(mps);
    const c10::Stream pool_stream = guard.getNewStream(mps); // torch.Stream("mps")
    std::string json = "{\"device\": " + quoted([[at::mps::MPSDevice::getInstance()->device() name] UTF8String]);
    json += ", \"default_id\": " + std::to_string(default_stream.id());
    json += ", \"to_default\": " + exchange(guard, default_stream);
    json += ", \"to_pool\": " + exchange(guard, pool_stream);
    json += ", \"back\": " + exchange(guard, default_stream) + "}";
    std::printf("%s\n", json.c_str());
  }
  return 0;
}
