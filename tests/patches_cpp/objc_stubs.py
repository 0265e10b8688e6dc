"""Minimal stand-ins for the Apple and c10 headers that MPSDevice.mm includes.

They let clang parse the patched Objective-C++ on Linux (-fsyntax-only). They declare
only what MPSDevice.mm and MPSDevice.h use, with Apple's own spellings where it matters
(property getters such as ``isLowPower``, ``registryID``, ``supportsFamily:``), so a
misspelt selector or a type error in our code fails the check. They say nothing about
behaviour: that is what the policy tests and a Mac build are for.
"""

from __future__ import annotations

from pathlib import Path

STUBS: dict[str, str] = {
    "objc_stub_base.h": """
#pragma once
#include <cstddef>
#include <cstdint>
typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#ifndef nil
#define nil nullptr
#endif
typedef long NSInteger;
typedef unsigned long NSUInteger;
#define NSIntegerMax __LONG_MAX__
static const NSInteger NSNotFound = NSIntegerMax;
// What macOS's SDK brings in with Foundation and <time.h> that upstream's MPS headers use
// without including it themselves (Grand Central Dispatch, a libc++ header, a Darwin clock).
#include <condition_variable>
#include <dispatch/dispatch.h>
#define CLOCK_UPTIME_RAW 8
extern "C" uint64_t clock_gettime_nsec_np(int clock_id);
""",
    "Foundation/Foundation.h": """
#pragma once
#include "objc_stub_base.h"
@protocol NSObject
- (instancetype)retain;
- (oneway void)release;
- (instancetype)autorelease;
- (NSUInteger)retainCount;
@end
__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)new;
+ (instancetype)alloc;
- (instancetype)init;
- (void)dealloc;
+ (BOOL)instancesRespondToSelector:(SEL)selector;
@end
@interface NSString : NSObject
@property (readonly) const char* UTF8String;
+ (instancetype)stringWithUTF8String:(const char*)s;
@end
typedef struct {
  unsigned long state;
  __unsafe_unretained id* itemsPtr;
  unsigned long* mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;
@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(__unsafe_unretained id[])buffer
                                    count:(NSUInteger)len;
@end
@interface NSArray<ObjectType> : NSObject <NSFastEnumeration>
@property (readonly) NSUInteger count;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)index;
- (ObjectType)objectAtIndex:(NSUInteger)index;
@end
typedef struct {
  NSInteger majorVersion;
  NSInteger minorVersion;
  NSInteger patchVersion;
} NSOperatingSystemVersion;
@interface NSProcessInfo : NSObject
- (BOOL)isOperatingSystemAtLeastVersion:(NSOperatingSystemVersion)version;
@end
Class NSClassFromString(NSString* name);
@interface NSError : NSObject
@property (readonly) NSString* localizedDescription;
@end
@interface NSURL : NSObject
+ (NSURL*)fileURLWithPath:(NSString*)path;
@end
""",
    "Metal/Metal.h": """
#pragma once
#include <Foundation/Foundation.h>
typedef enum MTLGPUFamily : NSInteger {
  MTLGPUFamilyApple1 = 1001,
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyApple8 = 1008,
  MTLGPUFamilyMac1 = 2001,
  MTLGPUFamilyMac2 = 2002,
  MTLGPUFamilyCommon1 = 3001,
  MTLGPUFamilyCommon2 = 3002,
  MTLGPUFamilyCommon3 = 3003,
  MTLGPUFamilyMetal3 = 5001,
} MTLGPUFamily;
// The kernel compile probe (MPSKernelProbe.mm): libraries, functions, pipelines.
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
typedef enum MTLFunctionType : NSUInteger {
  MTLFunctionTypeVertex = 1,
  MTLFunctionTypeFragment = 2,
  MTLFunctionTypeKernel = 3,
} MTLFunctionType;
@protocol MTLFunction <NSObject>
@property (readonly) NSString* name;
@property (readonly) MTLFunctionType functionType;
@end
@protocol MTLLibrary <NSObject>
@property (readonly) NSArray<NSString*>* functionNames;
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end
@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSUInteger threadExecutionWidth;
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end
@interface MTLCompileOptions : NSObject
@end
typedef enum MTLLanguageVersion : NSUInteger {
  MTLLanguageVersion2_3 = (2 << 16) + 3,
  MTLLanguageVersion3_0 = (3 << 16) + 0,
  MTLLanguageVersion3_1 = (3 << 16) + 1,
  MTLLanguageVersion3_2 = (3 << 16) + 2,
  MTLLanguageVersion4_0 = (4 << 16) + 0,
} MTLLanguageVersion;
typedef enum MTLStorageMode : NSUInteger {
  MTLStorageModeShared = 0,
  MTLStorageModeManaged = 1,
  MTLStorageModePrivate = 2,
  MTLStorageModeMemoryless = 3,
} MTLStorageMode;
typedef enum MTLCPUCacheMode : NSUInteger {
  MTLCPUCacheModeDefaultCache = 0,
  MTLCPUCacheModeWriteCombined = 1,
} MTLCPUCacheMode;
typedef enum MTLHazardTrackingMode : NSUInteger {
  MTLHazardTrackingModeDefault = 0,
  MTLHazardTrackingModeUntracked = 1,
  MTLHazardTrackingModeTracked = 2,
} MTLHazardTrackingMode;
typedef enum MTLHeapType : NSInteger {
  MTLHeapTypeAutomatic = 0,
  MTLHeapTypePlacement = 1,
} MTLHeapType;
typedef enum MTLPurgeableState : NSUInteger {
  MTLPurgeableStateKeepCurrent = 1,
  MTLPurgeableStateNonVolatile = 2,
  MTLPurgeableStateVolatile = 3,
  MTLPurgeableStateEmpty = 4,
} MTLPurgeableState;
#define MTLResourceCPUCacheModeShift 0
#define MTLResourceStorageModeShift 4
#define MTLResourceHazardTrackingModeShift 8
// NS_OPTIONS in Objective-C++: an integer type and its anonymous enum, as Apple's headers expand it.
typedef NSUInteger MTLResourceOptions;
enum : NSUInteger {
  MTLResourceCPUCacheModeDefaultCache = 0,
  MTLResourceStorageModeShared = 0 << MTLResourceStorageModeShift,
  MTLResourceStorageModeManaged = 1 << MTLResourceStorageModeShift,
  MTLResourceStorageModePrivate = 2 << MTLResourceStorageModeShift,
  MTLResourceHazardTrackingModeUntracked = 1 << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeTracked = 2 << MTLResourceHazardTrackingModeShift,
};
typedef struct {
  NSUInteger size;
  NSUInteger align;
} MTLSizeAndAlign;
@protocol MTLBuffer <NSObject>
@property (readonly) NSUInteger length;
@property (readonly) MTLStorageMode storageMode;
- (void*)contents;
@end
@interface MTLHeapDescriptor : NSObject
@property NSUInteger size;
@property MTLStorageMode storageMode;
@property MTLCPUCacheMode cpuCacheMode;
@property MTLHazardTrackingMode hazardTrackingMode;
@property MTLResourceOptions resourceOptions;
@property MTLHeapType type;
@end
@protocol MTLDevice;
@protocol MTLHeap <NSObject>
@property (readonly) NSUInteger size;
- (NSUInteger)maxAvailableSizeWithAlignment:(NSUInteger)alignment;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options offset:(NSUInteger)offset;
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state;
@end
@protocol MTLDevice <NSObject>
@property (readonly) NSString* name;
@property (readonly) uint64_t registryID;
@property (readonly, getter=isLowPower) BOOL lowPower;
@property (readonly, getter=isHeadless) BOOL headless;
@property (readonly, getter=isRemovable) BOOL removable;
@property (readonly) BOOL hasUnifiedMemory;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL*)url error:(NSError**)error;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function error:(NSError**)error;
@property (readonly) MTLSize maxThreadsPerThreadgroup;
@property (readonly) NSUInteger maxThreadgroupMemoryLength;
- (id<MTLHeap>)newHeapWithDescriptor:(MTLHeapDescriptor*)descriptor;
- (MTLSizeAndAlign)heapBufferSizeAndAlignWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) NSUInteger currentAllocatedSize;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
@end
NSArray<id<MTLDevice>>* MTLCopyAllDevices(void);
@protocol MTLCommandBuffer;
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);
@protocol MTLCommandBuffer <NSObject>
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (void)commit;
- (void)waitUntilCompleted;
@end
@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
@end
@protocol MTLComputeCommandEncoder <NSObject>
@end
@protocol MTLSharedEvent <NSObject>
@property uint64_t signaledValue;
@end
@class MTLSharedEventListener;
typedef void (^MTLSharedEventNotificationBlock)(id<MTLSharedEvent>, uint64_t value);
""",
    "MetalPerformanceShaders/MetalPerformanceShaders.h": """
#pragma once
#include <Metal/Metal.h>
@interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
+ (instancetype)commandBufferFromCommandQueue:(id<MTLCommandQueue>)queue;
@end
""",
    "MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h": """
#pragma once
#include <MetalPerformanceShaders/MetalPerformanceShaders.h>
@interface MPSGraph : NSObject
@end
@interface MPSGraphExecutionDescriptor : NSObject
@end
@interface MPSGraphCompilationDescriptor : NSObject
@end
@interface NSDictionary : NSObject
@end
""",
    "dispatch/dispatch.h": """
#pragma once
typedef struct dispatch_queue_s* dispatch_queue_t;
""",
    "mach/vm_page_size.h": """
#pragma once
extern unsigned long vm_page_size;
""",
    # MPSGuardImpl.h (hooked on 2.15.0) includes it for size_t
    "sys/_types/_size_t.h": """
#pragma once
#include <stddef.h>
""",
    "IOKit/IOKitLib.h": """
#pragma once
#include "objc_stub_base.h"
typedef unsigned int io_iterator_t;
typedef unsigned int io_registry_entry_t;
typedef unsigned int mach_port_t;
typedef int kern_return_t;
typedef const void* CFTypeRef;
typedef const struct __CFDictionary* CFMutableDictionaryRef;
typedef const struct __CFString* CFStringRef;
typedef const struct __CFNumber* CFNumberRef;
typedef const struct __CFAllocator* CFAllocatorRef;
#define KERN_SUCCESS 0
#define kCFNumberIntType 9
extern const mach_port_t kIOMainPortDefault;
extern const CFAllocatorRef kCFAllocatorDefault;
CFStringRef CFSTR(const char*);
CFMutableDictionaryRef IOServiceMatching(const char* name);
kern_return_t IOServiceGetMatchingServices(mach_port_t port, CFMutableDictionaryRef matching, io_iterator_t* it);
io_registry_entry_t IOIteratorNext(io_iterator_t it);
CFTypeRef IORegistryEntryCreateCFProperty(io_registry_entry_t e, CFStringRef key, CFAllocatorRef a, unsigned opts);
BOOL CFNumberGetValue(CFNumberRef n, int type, void* value);
void CFRelease(CFTypeRef ref);
kern_return_t IOObjectRelease(unsigned int object);
""",
    "c10/macros/Macros.h": """
#pragma once
#include <cstdint>
#define TORCH_API
#define C10_DIAGNOSTIC_PUSH_AND_IGNORED_IF_DEFINED(warning)
#define C10_DIAGNOSTIC_POP()
""",
    "c10/util/Exception.h": """
#pragma once
#include <string>
#include <vector>
namespace c10_stub {
template <typename... Args> void warn(const Args&...) {}
template <typename... Args> [[noreturn]] void fail(const Args&...) { throw 0; }
} // namespace c10_stub
#define TORCH_WARN(...) ::c10_stub::warn(__VA_ARGS__)
#define TORCH_WARN_ONCE(...) ::c10_stub::warn(__VA_ARGS__)
#define TORCH_CHECK(cond, ...) if (!(cond)) ::c10_stub::fail(__VA_ARGS__)
#define TORCH_INTERNAL_ASSERT(cond, ...) if (!(cond)) ::c10_stub::fail("" __VA_ARGS__)
#define TORCH_INTERNAL_ASSERT_DEBUG_ONLY(cond, ...) if (!(cond)) ::c10_stub::fail("" __VA_ARGS__)
""",
    "c10/util/CallOnce.h": """
#pragma once
#include <mutex>
namespace c10 {
using once_flag = std::once_flag;
template <typename F> void call_once(once_flag& flag, F&& f) { std::call_once(flag, f); }
} // namespace c10
""",
    "c10/util/env.h": """
#pragma once
#include <optional>
#include <string>
namespace c10::utils {
std::optional<std::string> get_env(const char* name);
}
""",
    "c10/core/Allocator.h": """
#pragma once
#include <memory>
#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>
namespace c10 { struct Allocator; }
namespace at { using c10::Allocator; }
""",
    "ATen/Device.h": """
#pragma once
namespace c10 {
enum class DeviceType { CPU, MPS };
struct Device { DeviceType type; int index; };
}
namespace at { using c10::Device; }
""",
    "ATen/mps/IndexKernels.h": "#pragma once\n",
    "ATen/mps/MPSStream.h": "#pragma once\n#include <IOKit/IOKitLib.h>\n",
    "ATen/native/mps/MPSGraphSequoiaOps.h": "#pragma once\n",
    "ATen/mps/MPSAllocatorInterface.h": """
#pragma once
#include <c10/core/Allocator.h>
namespace at::mps {
at::Allocator* getIMPSAllocator(bool sharedAllocator = false);
}
""",
}


def write_stubs(root: Path) -> Path:
    """Write the stand-ins under ``root`` and return it, for use as an -I directory."""
    for name, text in STUBS.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"), encoding="utf-8")
    return root
