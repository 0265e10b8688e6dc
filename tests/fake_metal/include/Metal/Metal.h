// Metal/Metal.h of the stand-in Metal (tests/fake_metal): our own declarations of the part
// of Apple's Metal API that intelmac-torch's Objective-C++ and upstream's MPS device and
// allocator code call, so that code compiles and runs on Linux (GNUstep Foundation, GCC's
// Objective-C runtime). The behaviour lives in fake_metal.mm; what a test controls and
// reads is in fake_metal.h. Names, selectors and enum values follow Apple's headers, so a
// misspelt selector fails to compile here as it would on a Mac.
#pragma once

#import <Foundation/Foundation.h>
#include <stdint.h>

#include "../fake_metal_foundation.h"

// GNUstep defines `_(X)` and `__(X)` as localisation macros (GNUstepBase/GNUstep.h);
// macOS's Foundation does not, and PyTorch's headers use `_` as a variable name
// (torch/headeronly/core/TensorAccessor.h). Every file that reaches Metal has included
// Foundation by now, and its include guard keeps them from coming back.
#undef _
#undef __

#if !defined(__BLOCKS__)
#error "the stand-in Metal needs blocks: compile with -fblocks and link -lBlocksRuntime"
#endif

// GPU families (MTLGPUFamily). Apple documents a family as a set of features a GPU
// supports; supportsFamily: is the way to ask. Apple1..Apple9 exist only on Apple GPUs,
// Mac2 on every Mac GPU that runs Metal 2 or later; a macOS VM's paravirtual device has
// neither. The values are those of Apple's header.
typedef NS_ENUM(NSInteger, MTLGPUFamily) {
  MTLGPUFamilyApple1 = 1001,
  MTLGPUFamilyApple2 = 1002,
  MTLGPUFamilyApple3 = 1003,
  MTLGPUFamilyApple4 = 1004,
  MTLGPUFamilyApple5 = 1005,
  MTLGPUFamilyApple6 = 1006,
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyApple8 = 1008,
  MTLGPUFamilyApple9 = 1009,
  MTLGPUFamilyMac1 = 2001,
  MTLGPUFamilyMac2 = 2002,
  MTLGPUFamilyCommon1 = 3001,
  MTLGPUFamilyCommon2 = 3002,
  MTLGPUFamilyCommon3 = 3003,
  MTLGPUFamilyMacCatalyst1 = 4001,
  MTLGPUFamilyMacCatalyst2 = 4002,
  MTLGPUFamilyMetal3 = 5001,
};

typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
  MTLLanguageVersion2_0 = (2 << 16) + 0,
  MTLLanguageVersion2_1 = (2 << 16) + 1,
  MTLLanguageVersion2_2 = (2 << 16) + 2,
  MTLLanguageVersion2_3 = (2 << 16) + 3,
  MTLLanguageVersion2_4 = (2 << 16) + 4,
  MTLLanguageVersion3_0 = (3 << 16) + 0,
  MTLLanguageVersion3_1 = (3 << 16) + 1,
  MTLLanguageVersion3_2 = (3 << 16) + 2,
  MTLLanguageVersion4_0 = (4 << 16) + 0,
};

// Where a resource's memory lives (MTLStorageMode). Apple: shared memory is visible to
// CPU and GPU; managed keeps a CPU copy and a GPU copy that the program synchronises
// (macOS only); private memory only the GPU reaches; memoryless is for render targets.
typedef NS_ENUM(NSUInteger, MTLStorageMode) {
  MTLStorageModeShared = 0,
  MTLStorageModeManaged = 1,
  MTLStorageModePrivate = 2,
  MTLStorageModeMemoryless = 3,
};

typedef NS_ENUM(NSUInteger, MTLCPUCacheMode) {
  MTLCPUCacheModeDefaultCache = 0,
  MTLCPUCacheModeWriteCombined = 1,
};

typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) {
  MTLHazardTrackingModeDefault = 0,
  MTLHazardTrackingModeUntracked = 1,
  MTLHazardTrackingModeTracked = 2,
};

typedef NS_ENUM(NSInteger, MTLHeapType) {
  MTLHeapTypeAutomatic = 0,
  MTLHeapTypePlacement = 1,
  MTLHeapTypeSparse = 2,
};

// MTLResourceOptions packs the three modes: CPU cache mode in bits 0-3, storage mode in
// bits 4-7, hazard tracking mode in bits 8-9 (Apple's shifts).
#define MTLResourceCPUCacheModeShift 0
#define MTLResourceCPUCacheModeMask (0xfUL << MTLResourceCPUCacheModeShift)
#define MTLResourceStorageModeShift 4
#define MTLResourceStorageModeMask (0xfUL << MTLResourceStorageModeShift)
#define MTLResourceHazardTrackingModeShift 8
#define MTLResourceHazardTrackingModeMask (0x3UL << MTLResourceHazardTrackingModeShift)

typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
  MTLResourceCPUCacheModeDefaultCache = MTLCPUCacheModeDefaultCache << MTLResourceCPUCacheModeShift,
  MTLResourceCPUCacheModeWriteCombined = MTLCPUCacheModeWriteCombined << MTLResourceCPUCacheModeShift,
  MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
  MTLResourceStorageModeManaged = MTLStorageModeManaged << MTLResourceStorageModeShift,
  MTLResourceStorageModePrivate = MTLStorageModePrivate << MTLResourceStorageModeShift,
  MTLResourceStorageModeMemoryless = MTLStorageModeMemoryless << MTLResourceStorageModeShift,
  MTLResourceHazardTrackingModeDefault = MTLHazardTrackingModeDefault << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeUntracked = MTLHazardTrackingModeUntracked << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeTracked = MTLHazardTrackingModeTracked << MTLResourceHazardTrackingModeShift,
  MTLResourceOptionCPUCacheModeDefault = MTLResourceCPUCacheModeDefaultCache,
  MTLResourceOptionCPUCacheModeWriteCombined = MTLResourceCPUCacheModeWriteCombined,
};

typedef NS_ENUM(NSUInteger, MTLPurgeableState) {
  MTLPurgeableStateKeepCurrent = 1,
  MTLPurgeableStateNonVolatile = 2,
  MTLPurgeableStateVolatile = 3,
  MTLPurgeableStateEmpty = 4,
};

typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};

typedef struct {
  NSUInteger size;
  NSUInteger align;
} MTLSizeAndAlign;

@protocol MTLDevice;
@protocol MTLHeap;
@protocol MTLCommandQueue;
@protocol MTLCommandBuffer;

typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

@protocol MTLResource <NSObject>
@property (readonly) id<MTLDevice> device;
@property (copy) NSString* label;
@property (readonly) MTLStorageMode storageMode;
@property (readonly) MTLCPUCacheMode cpuCacheMode;
@property (readonly) MTLHazardTrackingMode hazardTrackingMode;
@property (readonly) MTLResourceOptions resourceOptions;
// The heap a resource was made from, nil for a standalone resource.
@property (readonly) id<MTLHeap> heap;
@property (readonly) NSUInteger allocatedSize;
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state;
@end

@protocol MTLBuffer <MTLResource>
@property (readonly) NSUInteger length;
// Apple: the CPU address of a buffer's memory; a private buffer has none (NULL).
- (void*)contents;
// Apple: after the CPU writes a managed buffer, tell Metal which bytes changed so the
// GPU's copy is updated; only managed buffers have two copies to keep in step.
- (void)didModifyRange:(NSRange)range;
@end

@interface MTLHeapDescriptor : NSObject <NSCopying> {
  // The stand-in's storage. GCC's Objective-C runtime has a fragile ABI: instance
  // variables must be declared in the @interface, not in the @implementation.
 @private
  NSUInteger _fakeSize;
  MTLStorageMode _fakeStorage;
  MTLCPUCacheMode _fakeCache;
  MTLHazardTrackingMode _fakeHazard;
  MTLHeapType _fakeType;
}
@property (readwrite) NSUInteger size;
@property (readwrite) MTLStorageMode storageMode;
@property (readwrite) MTLCPUCacheMode cpuCacheMode;
@property (readwrite) MTLHazardTrackingMode hazardTrackingMode;
@property (readwrite) MTLHeapType type;
// Apple: the three modes above, packed; setting one side updates the other.
@property (readwrite) MTLResourceOptions resourceOptions;
@end

@protocol MTLHeap <NSObject>
@property (copy) NSString* label;
@property (readonly) id<MTLDevice> device;
@property (readonly) MTLStorageMode storageMode;
@property (readonly) MTLCPUCacheMode cpuCacheMode;
@property (readonly) MTLHazardTrackingMode hazardTrackingMode;
@property (readonly) MTLResourceOptions resourceOptions;
@property (readonly) MTLHeapType type;
@property (readonly) NSUInteger size;
@property (readonly) NSUInteger usedSize;
@property (readonly) NSUInteger currentAllocatedSize;
- (NSUInteger)maxAvailableSizeWithAlignment:(NSUInteger)alignment;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
// Apple: on a placement heap (MTLHeapTypePlacement), a buffer at an offset the program
// chooses; the program keeps track of which ranges are in use.
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                             options:(MTLResourceOptions)options
                              offset:(NSUInteger)offset;
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state;
@end

@protocol MTLCommandEncoder <NSObject>
@property (readonly) id<MTLDevice> device;
- (void)endEncoding;
@end

@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
// Apple (macOS): copies a managed resource's GPU changes back to its CPU copy once the
// command buffer completes.
- (void)synchronizeResource:(id<MTLResource>)resource;
@end

@protocol MTLCommandBuffer <NSObject>
@property (readonly) id<MTLDevice> device;
@property (readonly) id<MTLCommandQueue> commandQueue;
@property (readonly) MTLCommandBufferStatus status;
@property (readonly) BOOL retainedReferences;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (void)addScheduledHandler:(MTLCommandBufferHandler)block;
- (void)enqueue;
- (void)commit;
- (void)waitUntilScheduled;
- (void)waitUntilCompleted;
- (id<MTLBlitCommandEncoder>)blitCommandEncoder;
@end

@protocol MTLCommandQueue <NSObject>
@property (readonly) id<MTLDevice> device;
- (id<MTLCommandBuffer>)commandBuffer;
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences;
@end

// What Apple documents for each property, in short:
//   name: the GPU's name, as shown to users;
//   registryID: the GPU's IORegistry entry id, the same across processes;
//   lowPower: on a Mac with several GPUs, true for the integrated one that saves power
//     (an Intel iGPU beside an AMD GPU; also a lone Intel iGPU);
//   headless: no display can be attached (e.g. a Mac Pro's second GPU, many eGPUs);
//   removable: an external GPU (eGPU) that can be unplugged;
//   hasUnifiedMemory: CPU and GPU share memory (Apple silicon and Intel iGPUs);
//   recommendedMaxWorkingSetSize: how much memory the GPU can use without hurting
//     performance.
// Libraries, functions and compute pipelines: what the kernel compile probe
// (MPSKernelProbe.mm, issue 25) calls. Apple: a library holds compiled functions;
// newFunctionWithName: returns nil for a name it lacks; a compute pipeline is built for
// one device from a kernel function, synchronously, and is nil with an NSError when
// the device cannot run it.
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
typedef NS_ENUM(NSUInteger, MTLFunctionType) {
  MTLFunctionTypeVertex = 1,
  MTLFunctionTypeFragment = 2,
  MTLFunctionTypeKernel = 3,
};
@protocol MTLFunction <NSObject>
@property (readonly) NSString* name;
@property (readonly) MTLFunctionType functionType;
@end
@protocol MTLLibrary <NSObject>
@property (readonly) NSArray<NSString*>* functionNames;
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
@end
@protocol MTLComputePipelineState <NSObject>
// Apple: the SIMD width a dispatch should be a multiple of, for efficiency.
@property (readonly) NSUInteger threadExecutionWidth;
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end
@interface MTLCompileOptions : NSObject
@end

@protocol MTLDevice <NSObject>
@property (readonly) NSString* name;
@property (readonly) uint64_t registryID;
@property (readonly, getter=isLowPower) BOOL lowPower;
@property (readonly, getter=isHeadless) BOOL headless;
@property (readonly, getter=isRemovable) BOOL removable;
@property (readonly) BOOL hasUnifiedMemory;
@property (readonly) uint64_t recommendedMaxWorkingSetSize;
@property (readonly) NSUInteger maxBufferLength;
@property (readonly) NSUInteger currentAllocatedSize;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytes:(const void*)pointer length:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLHeap>)newHeapWithDescriptor:(MTLHeapDescriptor*)descriptor;
- (MTLSizeAndAlign)heapBufferSizeAndAlignWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL*)url error:(NSError**)error;
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function error:(NSError**)error;
@property (readonly) MTLSize maxThreadsPerThreadgroup;
@property (readonly) NSUInteger maxThreadgroupMemoryLength;
@end

#ifdef __cplusplus
extern "C" {
#endif
// Apple: every Metal device of the Mac, in the system's order; the caller owns the array
// (a Copy function).
NSArray<id<MTLDevice>>* MTLCopyAllDevices(void);
// Apple: the system's preferred device, owned by the caller; may be nil (e.g. for
// non-GUI processes on some Macs with several GPUs).
id<MTLDevice> MTLCreateSystemDefaultDevice(void);
#ifdef __cplusplus
}
#endif
