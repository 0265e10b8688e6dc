// Stand-in for Darwin's <sys/_types/_size_t.h>, which upstream's MPSGuardImpl.h includes:
// size_t, as the C library of this host declares it.
#pragma once
#include <cstddef>
