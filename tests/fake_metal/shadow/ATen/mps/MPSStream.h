// Stand-in for upstream's ATen/mps/MPSStream.h in tests/fake_metal builds: the real one
// needs MetalPerformanceShaders and MPSGraph, which the stand-in Metal does not provide.
// MPSDevice.mm includes it only for IOKit (getCoreCount) and nothing it declares.
#pragma once
#include <IOKit/IOKitLib.h>
