// device_stand_in.h: upstream's MPSDevice singleton, in our small version, for the programs
// and libraries in this folder that run upstream's code over one stand-in device
// (whole_stand_ins.mm, guard_streams.mm). Include it once per binary, which defines
// intelmac_test::stand_in_device(): the device the singleton holds (nil: none).
#pragma once

#include <ATen/mps/MPSDevice.h>

namespace intelmac_test {
id<MTLDevice> stand_in_device();
} // namespace intelmac_test

namespace at::mps {

MPSDevice* MPSDevice::_device = nullptr;

MPSDevice* MPSDevice::getInstance() {
  static MPSDevice device;
  return &device;
}

MPSDevice::MPSDevice() : _mtl_device([intelmac_test::stand_in_device() retain]) {}

MPSDevice::~MPSDevice() {
  [_mtl_device release];
}

} // namespace at::mps
