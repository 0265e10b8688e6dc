// Stand-in for Darwin's <mach/vm_page_size.h>, which upstream's MPSAllocator.h includes
// for vm_page_size (the alignment of heapAvailableSize): the page size of this host.
#pragma once
#include <unistd.h>
#define vm_page_size (static_cast<unsigned long>(sysconf(_SC_PAGESIZE)))
