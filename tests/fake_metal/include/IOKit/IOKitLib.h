// IOKit/IOKitLib.h of the stand-in Metal (tests/fake_metal): the IORegistry calls with
// which upstream's MPSDevice::getCoreCount() reads "gpu-core-count" of AGXAccelerator
// services. Apple GPUs register such a service; Intel and AMD GPUs do not, so on an Intel
// Mac the iteration finds nothing. The stand-in lists one AGXAccelerator entry per
// configured device with an Apple family, carrying its configured core count.
// The few CoreFoundation types and calls involved are declared here too.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned int mach_port_t;
typedef unsigned int io_object_t;
typedef io_object_t io_iterator_t;
typedef io_object_t io_registry_entry_t;
typedef int kern_return_t;
typedef unsigned int IOOptionBits;
typedef const void* CFTypeRef;
typedef struct __CFDictionary* CFMutableDictionaryRef;
typedef const struct __CFDictionary* CFDictionaryRef;
typedef const struct __CFString* CFStringRef;
typedef const struct __CFNumber* CFNumberRef;
typedef const struct __CFAllocator* CFAllocatorRef;
typedef long CFIndex;
typedef CFIndex CFNumberType;
typedef unsigned long CFTypeID;
typedef unsigned char Boolean;

#define KERN_SUCCESS 0
#define MACH_PORT_NULL 0
enum { kCFNumberSInt32Type = 3, kCFNumberSInt64Type = 4, kCFNumberIntType = 9 };

extern const mach_port_t kIOMainPortDefault;
extern const mach_port_t kIOMasterPortDefault;
extern const CFAllocatorRef kCFAllocatorDefault;

CFStringRef FakeMetalCFString(const char* text);
#define CFSTR(text) FakeMetalCFString("" text "")

CFMutableDictionaryRef IOServiceMatching(const char* name);
kern_return_t IOServiceGetMatchingServices(mach_port_t mainPort, CFDictionaryRef matching, io_iterator_t* existing);
io_object_t IOIteratorNext(io_iterator_t iterator);
CFTypeRef IORegistryEntryCreateCFProperty(io_registry_entry_t entry, CFStringRef key, CFAllocatorRef allocator,
                                          IOOptionBits options);
CFTypeRef IORegistryEntrySearchCFProperty(io_registry_entry_t entry, const char* plane, CFStringRef key,
                                          CFAllocatorRef allocator, IOOptionBits options);
kern_return_t IOObjectRelease(io_object_t object);
CFTypeID CFGetTypeID(CFTypeRef cf);
CFTypeID CFNumberGetTypeID(void);
Boolean CFNumberGetValue(CFNumberRef number, CFNumberType theType, void* valuePtr);
void CFRelease(CFTypeRef cf);

#ifdef __cplusplus
}
#endif
