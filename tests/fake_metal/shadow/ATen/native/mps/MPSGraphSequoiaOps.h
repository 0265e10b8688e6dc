// Stand-in for upstream's ATen/native/mps/MPSGraphSequoiaOps.h in tests/fake_metal
// builds: MPSGraph categories that MPSDevice.mm includes but does not call.
#pragma once
