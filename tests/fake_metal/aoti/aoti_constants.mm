// AOTInductor's model_base.h (the line's exact wheel header, the series applied): its
// load_constants() run against the stand-in Metal (issue 23, finding 9; patch 0011).
//
// A model made for "mps" copies each of its constants from the model's data into one blob
// that the MPS allocator gave it, then wraps each constant as a tensor at its offset in the
// blob. The C shim functions the header calls are stand-ins of our own here, each doing
// what the release binary's does with Metal:
// - aoti_torch_mps_malloc: a buffer in the storage mode our allocator gives tensors on the
//   GPU (private off Apple GPUs on 2.14.1/2.15.0, and on a GPU without unified memory);
// - aoti_torch_mps_memcpy: a memcpy to [buffer contents] + offset, with no NULL test, as
//   the 2.14.1 binary's _aoti_torch_mps_memcpy does;
// - aoti_torch_copy_ of a CPU tensor into an MPS one: upstream's Copy.mm
//   (copy_to_mps_stride_contig): a shared staging buffer with the bytes, a blit to the
//   destination at its storage offset times its element size, commit and wait.
// Tensors are records of what the header asked for (data, offset, sizes, dtype, device).

#import <Metal/Metal.h>

#include <torch/csrc/inductor/aoti_runtime/model_base.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fake_metal.h"

namespace {

constexpr int32_t kCPU = 0;  // c10::DeviceType::CPU
constexpr int32_t kCUDA = 1;  // c10::DeviceType::CUDA
constexpr int32_t kMPS = 13;  // c10::DeviceType::MPS
constexpr int32_t kUInt8 = 0;  // c10::ScalarType::Byte
constexpr int32_t kFloat = 6;  // c10::ScalarType::Float

struct StandInTensor {
  void* data;
  int64_t storage_offset;
  std::vector<int64_t> sizes;
  int32_t dtype;
  int32_t device_type;
};

id<MTLDevice> g_device = nil;
MTLResourceOptions g_tensor_storage = MTLResourceStorageModePrivate;
int g_live_tensors = 0;
std::vector<std::string> g_calls;

StandInTensor* tensor(AtenTensorHandle handle) {
  return reinterpret_cast<StandInTensor*>(handle);
}

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case kUInt8:
      return 1;
    case kFloat:
      return 4;
    default:
      return 0;
  }
}

}  // namespace

extern "C" {

int32_t aoti_torch_device_type_cpu() {
  return kCPU;
}
int32_t aoti_torch_device_type_cuda() {
  return kCUDA;
}
int32_t aoti_torch_device_type_mps() {
  return kMPS;
}
int32_t aoti_torch_dtype_uint8() {
  return kUInt8;
}
int32_t aoti_torch_dtype_float32() {
  return kFloat;
}
size_t aoti_torch_dtype_element_size(int32_t dtype) {
  return element_size(dtype);
}

AOTITorchError aoti_torch_mps_malloc(void** buffer, size_t num_bytes) {
  g_calls.push_back("mps_malloc");
  id<MTLBuffer> made = [g_device newBufferWithLength:num_bytes options:g_tensor_storage];
  *buffer = (void*)made;
  return made != nil ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

AOTITorchError aoti_torch_mps_free(void* buffer) {
  g_calls.push_back("mps_free");
  [(id<MTLBuffer>)buffer release];
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_mps_memcpy(void* buffer, size_t constant_offset, size_t bytes_read, size_t data_size,
                                     uint8_t* constants_start) {
  g_calls.push_back("mps_memcpy");
  auto* contents = static_cast<uint8_t*>([(id<MTLBuffer>)buffer contents]);
  std::memcpy(contents + constant_offset, constants_start + bytes_read, data_size);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_create_tensor_from_blob(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                  const int64_t* strides_ptr, int64_t storage_offset,
                                                  int32_t dtype, int32_t device_type, int32_t device_index,
                                                  AtenTensorHandle* ret_new_tensor) {
  g_calls.push_back(device_type == kMPS ? "tensor_from_blob(mps)" : "tensor_from_blob(cpu)");
  auto* made = new StandInTensor{data, storage_offset, std::vector<int64_t>(sizes_ptr, sizes_ptr + ndim), dtype,
                                 device_type};
  ++g_live_tensors;
  *ret_new_tensor = reinterpret_cast<AtenTensorHandle>(made);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_create_tensor_from_blob_v2(void* data, int64_t ndim, const int64_t* sizes_ptr,
                                                     const int64_t* strides_ptr, int64_t storage_offset,
                                                     int32_t dtype, int32_t device_type, int32_t device_index,
                                                     AtenTensorHandle* ret_new_tensor, int32_t layout,
                                                     const uint8_t* opaque_metadata,
                                                     int64_t opaque_metadata_size) {
  return aoti_torch_create_tensor_from_blob(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype, device_type,
                                            device_index, ret_new_tensor);
}

// As at::Tensor::data_ptr(): the storage's data plus the storage offset in bytes (for an MPS
// tensor the buffer's handle plus the offset, which the model only keeps).
AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle handle, void** ret_data_ptr) {
  StandInTensor* t = tensor(handle);
  *ret_data_ptr = static_cast<uint8_t*>(t->data) + t->storage_offset * element_size(t->dtype);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle handle) {
  delete tensor(handle);
  --g_live_tensors;
  return AOTI_TORCH_SUCCESS;
}

// Copy.mm's CPU-to-MPS path for a contiguous destination (the only one the header takes).
AOTITorchError aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src, int32_t non_blocking) {
  g_calls.push_back("copy_");
  StandInTensor* to = tensor(self);
  StandInTensor* from = tensor(src);
  if (to->device_type != kMPS || from->device_type != kCPU || to->dtype != from->dtype) {
    return AOTI_TORCH_FAILURE;
  }
  size_t bytes = element_size(from->dtype);
  for (int64_t size : from->sizes) {
    bytes *= static_cast<size_t>(size);
  }
  const auto* source = static_cast<const uint8_t*>(from->data) + from->storage_offset * element_size(from->dtype);
  id<MTLBuffer> staging = [g_device newBufferWithBytes:source length:bytes options:MTLResourceStorageModeShared];
  id<MTLCommandQueue> queue = [g_device newCommandQueue];
  id<MTLCommandBuffer> commands = [queue commandBuffer];
  id<MTLBlitCommandEncoder> blit = [commands blitCommandEncoder];
  [blit copyFromBuffer:staging
           sourceOffset:0
               toBuffer:(id<MTLBuffer>)to->data
      destinationOffset:to->storage_offset * element_size(to->dtype)
                   size:bytes];
  [blit endEncoding];
  [commands commit];
  if (!non_blocking) {
    [commands waitUntilCompleted];
  }
  [staging release];
  [queue release];
  return AOTI_TORCH_SUCCESS;
}

}  // extern "C"

// The model's data: the constants one after the other, as AOTInductor links them in.
// w0: 3 float32 values, w1: 5 uint8 values (an odd size, so w1 starts off any alignment).
uint8_t _binary_constants_bin_start[] = {
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40,  // 1.0f 2.0f 3.0f
    0x11, 0x22, 0x33, 0x44, 0x55,
};
uint8_t _binary_constants_bin_end[] = {0};

namespace {

using torch::aot_inductor::AOTInductorModelBase;
using torch::aot_inductor::ConstantMap;

// A constant's device is recorded from 2.14 (ConstInfo::device_type); 2.9.1 has none.
template <typename Info>
auto set_device_type(Info& info, int32_t type, int) -> decltype(info.device_type = type, void()) {
  info.device_type = type;
}
template <typename Info>
void set_device_type(Info&, int32_t, long) {}

// What AOTInductor generates for a model with two constants and no kernels.
class Model : public AOTInductorModelBase<Model> {
 public:
  Model() : AOTInductorModelBase<Model>(0, 0, 2, "mps", std::nullopt) {
    describe(0, "w0", kFloat, 3);
    describe(1, "w1", kUInt8, 5);
  }

 private:
  // A one-dimensional constant of `count` elements on the MPS device.
  void describe(size_t index, const char* name, int32_t dtype, int64_t count) {
    auto& info = constants_info_[index];
    info.name = name;
    info.original_fqn = name;
    info.dtype = dtype;
    set_device_type(info, kMPS, 0);
    info.data_size = static_cast<size_t>(count) * element_size(dtype);
    info.shape = {count};
    info.stride = {1};
  }
};

std::string g_result;

}  // namespace

extern "C" {

// Loads the model's constants on the stand-in's first device, the blob in `storage`
// (MTLResourceOptions), and answers in JSON: per constant, whether the tensor the model
// made reads the constant's bytes on the GPU (the stand-in's GPU copy of the buffer),
// the shim calls made, the tensors left alive and the stand-in's violations.
const char* intelmac_aoti_load_constants(unsigned long storage) {
  @autoreleasepool {
    g_device = MTLCreateSystemDefaultDevice();
    g_tensor_storage = storage;
    g_calls.clear();
    std::ostringstream out;
    out << "{\"constants\": {";
    {
      Model model;
      auto constants = std::make_shared<ConstantMap>();
      model.update_constants_map(constants, false);
      model.load_constants();
      const uint8_t* expected = _binary_constants_bin_start;
      for (int i = 0; i < 2; ++i) {
        const char* name = i == 0 ? "w0" : "w1";
        StandInTensor* t = tensor(constants->at(name).get());
        const size_t bytes = i == 0 ? 12 : 5;
        const auto* gpu = static_cast<const uint8_t*>(fm_buffer_gpu_bytes(t->data));
        const bool reads = t->device_type == kMPS && gpu != nullptr &&
            std::memcmp(gpu + t->storage_offset * element_size(t->dtype), expected, bytes) == 0;
        out << (i ? ", " : "") << "\"" << name << "\": {\"reads_its_bytes\": " << (reads ? "true" : "false")
            << ", \"storage_offset\": " << t->storage_offset << "}";
        expected += bytes;
      }
    }
    out << "}, \"calls\": [";
    for (size_t i = 0; i < g_calls.size(); ++i) {
      out << (i ? ", " : "") << "\"" << g_calls[i] << "\"";
    }
    out << "], \"live_tensors\": " << g_live_tensors << ", \"violations\": " << fake_metal_violation_count()
        << ", \"records\": " << fake_metal_records_json() << "}";
    g_result = out.str();
    return g_result.c_str();
  }
}

}  // extern "C"
