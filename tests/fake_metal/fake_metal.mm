// fake_metal.mm: the stand-in Metal of tests/fake_metal, our own code. It behaves as
// Apple's documentation says Metal behaves on Macs without a Mac, for the calls our
// Objective-C++ and upstream's MPS device and allocator code make, and it records every
// call that Metal refuses and every rule a program breaks (fake_metal.h reads them).
// README.md beside it lists the rules with the documentation each follows.
#import <Foundation/Foundation.h>
#include <Block.h>

#include <Metal/Metal.h>
#include <IOKit/IOKitLib.h>
#include <fake_metal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::recursive_mutex& lock() {
  static std::recursive_mutex m;
  return m;
}
using Guard = std::lock_guard<std::recursive_mutex>;

// --- records -------------------------------------------------------------------------------

// Kinds a correct program never causes; the others are refusals Metal reports by
// returning nil/NULL (a program may probe them) or plain events.
const char* const kViolations[] = {
    "private_contents",                // contents of a private buffer (NULL)
    "heap_buffer_storage_mismatch",    // heap buffer options' storage or CPU cache mode != the heap's
    "did_modify_range_not_managed",    // didModifyRange: on a buffer that is not managed
    "did_modify_range_out_of_bounds",  // didModifyRange: past the buffer's end
    "synchronize_not_managed",         // synchronizeResource: on a resource that is not managed
    "blit_out_of_bounds",              // a blit range outside a buffer
    "buffer_freed_while_in_use",       // released while an uncompleted command buffer uses it
    "handler_after_commit",            // addCompletedHandler: after commit
    "commit_twice",                    // commit of a committed command buffer
    "encoder_not_ended",               // commit with an encoder whose endEncoding was not called
    "encode_after_commit",             // an encoder made from a committed command buffer
    "purged_contents",                 // contents of a buffer whose memory was purged (Empty)
    "heap_placement_not_placement",    // newBufferWithLength:options:offset: on an automatic heap
    "heap_placement_out_of_bounds",    // a placement outside the heap
    "heap_placement_misaligned",       // a placement at an offset that is not a multiple of the
                                       // alignment heapBufferSizeAndAlignWithLength:options: gives
    "handler_blocked",                 // a command buffer's handlers did not return: on a Mac, a
                                       // handler waiting for what the completing thread holds
};

bool is_violation(const std::string& kind) {
  for (const char* v : kViolations) {
    if (kind == v) {
      return true;
    }
  }
  return false;
}

NSMutableArray* records() {
  static NSMutableArray* all = [[NSMutableArray alloc] init];
  return all;
}

int& violation_count() {
  static int count = 0;
  return count;
}

NSString* ns(const std::string& s) {
  return [NSString stringWithUTF8String:s.c_str()];
}

void record(const std::string& kind, id<MTLDevice> device, const std::string& message,
            NSDictionary* extra = nil) {
  Guard g(lock());
  @autoreleasepool {
  NSMutableDictionary* entry = [NSMutableDictionary dictionary];
  [entry setObject:ns(kind) forKey:@"kind"];
  [entry setObject:(device != nil ? [device name] : @"") forKey:@"device"];
  [entry setObject:ns(message) forKey:@"message"];
  [entry setObject:[NSNumber numberWithBool:is_violation(kind)] forKey:@"violation"];
  if (extra != nil) {
    [entry addEntriesFromDictionary:extra];
  }
  [records() addObject:entry];
  }
  if (is_violation(kind)) {
    ++violation_count();
  }
}

std::string& last_error() {
  static std::string text;
  return text;
}

const char* mode_name(MTLStorageMode mode) {
  switch (mode) {
    case MTLStorageModeShared:
      return "shared";
    case MTLStorageModeManaged:
      return "managed";
    case MTLStorageModePrivate:
      return "private";
    case MTLStorageModeMemoryless:
      return "memoryless";
  }
  return "unknown";
}

MTLStorageMode storage_of(MTLResourceOptions options) {
  return static_cast<MTLStorageMode>((options & MTLResourceStorageModeMask) >> MTLResourceStorageModeShift);
}
MTLCPUCacheMode cache_of(MTLResourceOptions options) {
  return static_cast<MTLCPUCacheMode>((options & MTLResourceCPUCacheModeMask) >> MTLResourceCPUCacheModeShift);
}
MTLHazardTrackingMode hazard_of(MTLResourceOptions options) {
  return static_cast<MTLHazardTrackingMode>((options & MTLResourceHazardTrackingModeMask) >>
                                            MTLResourceHazardTrackingModeShift);
}
MTLResourceOptions pack(MTLStorageMode s, MTLCPUCacheMode c, MTLHazardTrackingMode h) {
  return (static_cast<NSUInteger>(s) << MTLResourceStorageModeShift) |
      (static_cast<NSUInteger>(c) << MTLResourceCPUCacheModeShift) |
      (static_cast<NSUInteger>(h) << MTLResourceHazardTrackingModeShift);
}

// The stand-in's default allocation granule: sizes of heap buffers are rounded up to it and
// it is their alignment. Real GPUs report their own values (heapBufferSizeAndAlignWithLength:),
// which may differ per storage mode; code must ask rather than assume. A device configured
// with "heap_alignment" answers per storage mode (fakeHeapAlignFor:).
constexpr NSUInteger kGranule = 256;
NSUInteger round_up(NSUInteger n, NSUInteger a) {
  return a == 0 ? n : (n + a - 1) / a * a;
}

// --- the configured Mac --------------------------------------------------------------------

struct Config {
  NSInteger system_default = 0;  // -1: nil
  NSInteger macos_major = 14, macos_minor = 0, macos_patch = 0;
  bool mpsgraph = true;
};
Config& config() {
  static Config c;
  return c;
}
NSMutableArray* devices_list() {
  static NSMutableArray* list = [[NSMutableArray alloc] init];
  return list;
}
bool& configured() {
  static bool done = false;
  return done;
}

} // namespace

// --- classes -------------------------------------------------------------------------------

@class FakeMTLCommandBuffer;

@interface FakeMTLDevice : NSObject <MTLDevice> {
 @public
  NSString* _name;
  uint64_t _registryID;
  BOOL _lowPower, _removable, _headless, _unified;
  long _queries; // hasUnifiedMemory and supportsFamily: asked by the code under test
  uint64_t _workingSet;
  uint64_t _memoryLimit; // 0: none; else newHeapWithDescriptor:/newBufferWithLength: past it get nil
  NSUInteger _maxBufferLength;
  NSUInteger _heapAlign[4]; // per MTLStorageMode (shared, managed, private, memoryless)
  std::vector<NSInteger>* _families;
  // The kernel compile probe's answers (issue 25): the pipelines' SIMD width, the
  // threadgroup limits, and the functions whose pipelines fail, with Metal's message.
  NSUInteger _executionWidth, _maxThreadsPerThreadgroup, _threadgroupMemory;
  NSDictionary* _pipelineFailures;
  NSString* _metalVersion;
  int _coreCount;
  NSUInteger _allocated;
}
@end

// What a heap and a buffer share: Apple's MTLResource properties (a heap has them too), and
// the device that made them, retained.
@interface FakeMTLResource : NSObject {
 @public
  FakeMTLDevice* _device;
  NSString* _label;
  MTLStorageMode _storage;
  MTLCPUCacheMode _cache;
  MTLHazardTrackingMode _hazard;
  MTLPurgeableState _purgeable;
}
- (void)fakeOn:(FakeMTLDevice*)device
       storage:(MTLStorageMode)storage
         cache:(MTLCPUCacheMode)cache
        hazard:(MTLHazardTrackingMode)hazard;
// Declared here, so that the subclasses' protocols (MTLHeap, MTLBuffer) find them.
@property (copy) NSString* label;
@property (readonly) id<MTLDevice> device;
@property (readonly) MTLStorageMode storageMode;
@property (readonly) MTLCPUCacheMode cpuCacheMode;
@property (readonly) MTLHazardTrackingMode hazardTrackingMode;
@property (readonly) MTLResourceOptions resourceOptions;
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state;
@end

@interface FakeMTLHeap : FakeMTLResource <MTLHeap> {
 @public
  NSUInteger _size, _used;
  MTLHeapType _type;
}
- (BOOL)fakeMatches:(MTLResourceOptions)options in:(const char*)call;
@end

@interface FakeMTLBuffer : FakeMTLResource <MTLBuffer> {
 @public
  FakeMTLHeap* _heap;  // retained: a heap lives while its resources do
  NSUInteger _length, _allocated;
  unsigned char* _gpu;  // what the GPU reads and writes (blits)
  unsigned char* _cpu;  // what contents returns: _gpu when shared, a copy when managed, NULL when private
  std::vector<FakeMTLCommandBuffer*>* _usedBy;  // uncompleted command buffers that use it, not retained
}
@end

struct FakeCommand {
  enum Kind { copy, fill, sync } kind;
  FakeMTLBuffer* source;
  NSUInteger source_offset;
  FakeMTLBuffer* destination;
  NSUInteger destination_offset;
  NSUInteger size;
  uint8_t value;
};

@interface FakeMTLCommandQueue : NSObject <MTLCommandQueue> {
 @public
  FakeMTLDevice* _device;
}
@end

@interface FakeMTLCommandBuffer : NSObject <MTLCommandBuffer> {
 @public
  FakeMTLDevice* _device;
  FakeMTLCommandQueue* _queue;
  MTLCommandBufferStatus _status;
  BOOL _retained;
  std::vector<FakeCommand>* _commands;
  std::vector<FakeMTLBuffer*>* _uses;  // retained only when _retained
  std::vector<MTLCommandBufferHandler>* _completed;
  std::vector<MTLCommandBufferHandler>* _scheduled;
  int _openEncoders;
}
- (void)fakeUse:(FakeMTLBuffer*)buffer;
- (void)fakeComplete;
- (void)fakeEndUses;
@end

@interface FakeMTLBlitCommandEncoder : NSObject <MTLBlitCommandEncoder> {
 @public
  FakeMTLCommandBuffer* _commandBuffer;  // retained
  BOOL _ended;
}
@end

namespace {

std::vector<FakeMTLCommandBuffer*>& pending() {
  static std::vector<FakeMTLCommandBuffer*> list;  // committed, not completed; retained
  return list;
}

FakeMTLBuffer* as_buffer(id object) {
  return [object isKindOfClass:[FakeMTLBuffer class]] ? (FakeMTLBuffer*)object : nil;
}

} // namespace

// --- libraries, functions, compute pipelines (the kernel compile probe, issue 25) ---------
// A stand-in library file is JSON: {"functions": [{"name": "add_float", "type": "kernel"},
// {"name": "blit_vertex", "type": "vertex"}]}; which pipelines fail is the device's
// configuration ("pipeline_failures": {"<function>": "<Metal's message>"}).

@interface FakeMTLFunction : NSObject <MTLFunction> {
 @public
  NSString* _name;
  MTLFunctionType _type;
}
@end

@implementation FakeMTLFunction
- (void)dealloc {
  [_name release];
  [super dealloc];
}
- (NSString*)name {
  return _name;
}
- (MTLFunctionType)functionType {
  return _type;
}
@end

@interface FakeMTLLibrary : NSObject <MTLLibrary> {
 @public
  NSArray* _names;
  NSDictionary* _types;  // name -> NSNumber(MTLFunctionType)
}
@end

@implementation FakeMTLLibrary
- (void)dealloc {
  [_names release];
  [_types release];
  [super dealloc];
}
- (NSArray<NSString*>*)functionNames {
  return _names;
}
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName {
  NSNumber* type = [_types objectForKey:functionName];
  if (type == nil) {
    return nil;  // Apple: nil when the library has no function of that name
  }
  FakeMTLFunction* function = [[FakeMTLFunction alloc] init];  // +1: a "new" method
  function->_name = [functionName copy];
  function->_type = (MTLFunctionType)[type unsignedIntegerValue];
  return function;
}
@end

@interface FakeMTLComputePipelineState : NSObject <MTLComputePipelineState> {
 @public
  NSUInteger _width, _maxThreads;
}
@end

@implementation FakeMTLComputePipelineState
- (NSUInteger)threadExecutionWidth {
  return _width;
}
- (NSUInteger)maxTotalThreadsPerThreadgroup {
  return _maxThreads;
}
@end

@implementation MTLCompileOptions
@end

namespace {

NSError* metal_error(NSString* message) {
  NSDictionary* info = [NSDictionary dictionaryWithObject:message forKey:NSLocalizedDescriptionKey];
  return [NSError errorWithDomain:@"MTLLibraryErrorDomain" code:1 userInfo:info];
}

FakeMTLLibrary* library_of(NSArray* functions, NSString** why) {
  NSMutableArray* names = [NSMutableArray array];
  NSMutableDictionary* types = [NSMutableDictionary dictionary];
  for (id entry in functions) {
    id name = [entry isKindOfClass:[NSDictionary class]] ? [entry objectForKey:@"name"] : nil;
    id kind = [entry isKindOfClass:[NSDictionary class]] ? [entry objectForKey:@"type"] : nil;
    if (![name isKindOfClass:[NSString class]]) {
      *why = @"a function without a name";
      return nil;
    }
    MTLFunctionType type = MTLFunctionTypeKernel;
    if ([kind isEqual:@"vertex"]) {
      type = MTLFunctionTypeVertex;
    } else if ([kind isEqual:@"fragment"]) {
      type = MTLFunctionTypeFragment;
    }
    [names addObject:name];
    [types setObject:[NSNumber numberWithUnsignedInteger:type] forKey:name];
  }
  FakeMTLLibrary* library = [[FakeMTLLibrary alloc] init];  // +1: returned by a "new" method
  library->_names = [names copy];
  library->_types = [types copy];
  return library;
}

} // namespace

@implementation FakeMTLDevice
- (void)dealloc {
  [_name release];
  [_metalVersion release];
  [_pipelineFailures release];
  delete _families;
  [super dealloc];
}
- (NSString*)name {
  return _name;
}
- (uint64_t)registryID {
  return _registryID;
}
- (BOOL)isLowPower {
  return _lowPower;
}
- (BOOL)isHeadless {
  return _headless;
}
- (BOOL)isRemovable {
  return _removable;
}
- (BOOL)hasUnifiedMemory {
  ++_queries;
  return _unified;
}
- (uint64_t)recommendedMaxWorkingSetSize {
  return _workingSet;
}
- (NSUInteger)maxBufferLength {
  return _maxBufferLength;
}
- (NSUInteger)currentAllocatedSize {
  return _allocated;
}
- (BOOL)fakeHasFamily:(MTLGPUFamily)family {
  return std::find(_families->begin(), _families->end(), (NSInteger)family) != _families->end();
}
- (BOOL)supportsFamily:(MTLGPUFamily)family {
  ++_queries;
  return [self fakeHasFamily:family];
}
- (id<MTLLibrary>)newLibraryWithURL:(NSURL*)url error:(NSError**)error {
  NSData* data = [NSData dataWithContentsOfFile:[url path]];
  id parsed = data != nil ? [NSJSONSerialization JSONObjectWithData:data options:0 error:NULL] : nil;
  id functions = [parsed isKindOfClass:[NSDictionary class]] ? [parsed objectForKey:@"functions"] : nil;
  NSString* why = @"Invalid library file";
  FakeMTLLibrary* library = [functions isKindOfClass:[NSArray class]] ? library_of(functions, &why) : nil;
  if (library == nil && error != NULL) {
    *error = metal_error(why);
  }
  return library;
}
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error {
  // Every `kernel void <name>(` of the source becomes a kernel function.
  NSMutableArray* functions = [NSMutableArray array];
  for (NSString* part in [source componentsSeparatedByString:@"kernel void "]) {
    NSRange paren = [part rangeOfString:@"("];
    if (part != [[source componentsSeparatedByString:@"kernel void "] objectAtIndex:0] && paren.location != NSNotFound) {
      [functions addObject:[NSDictionary dictionaryWithObject:[part substringToIndex:paren.location] forKey:@"name"]];
    }
  }
  NSString* why = @"no kernel";
  FakeMTLLibrary* library = [functions count] ? library_of(functions, &why) : nil;
  if (library == nil && error != NULL) {
    *error = metal_error(why);
  }
  return library;
}
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function
                                                            error:(NSError**)error {
  NSString* failure = [_pipelineFailures objectForKey:[function name]];
  if (failure == nil && [function functionType] != MTLFunctionTypeKernel) {
    failure = @"a compute pipeline needs a kernel function";  // Apple's rule
  }
  if (failure != nil) {
    if (error != NULL) {
      *error = metal_error(failure);
    }
    return nil;
  }
  FakeMTLComputePipelineState* pipeline = [[FakeMTLComputePipelineState alloc] init];
  pipeline->_width = _executionWidth;
  pipeline->_maxThreads = _maxThreadsPerThreadgroup;
  return pipeline;
}
- (MTLSize)maxThreadsPerThreadgroup {
  MTLSize size = {_maxThreadsPerThreadgroup, _maxThreadsPerThreadgroup, 64};
  return size;
}
- (NSUInteger)maxThreadgroupMemoryLength {
  return _threadgroupMemory;
}
- (BOOL)fakeIsAppleGPU {
  return [self fakeHasFamily:MTLGPUFamilyApple1];
}
// The size granule and alignment of a heap buffer of this storage mode on this device.
- (NSUInteger)fakeHeapAlignFor:(MTLStorageMode)storage {
  const NSUInteger index = static_cast<NSUInteger>(storage);
  return index < 4 && _heapAlign[index] != 0 ? _heapAlign[index] : kGranule;
}
- (id<MTLCommandQueue>)newCommandQueue {
  FakeMTLCommandQueue* queue = [[FakeMTLCommandQueue alloc] init];
  queue->_device = [self retain];
  return queue;
}
// The GPU's memory is finite: past the configured limit Metal returns nil (a real GPU
// pages or fails; the allocator must treat nil as memory it could not get).
- (BOOL)fakeMayAllocate:(NSUInteger)size what:(const char*)what {
  if (_memoryLimit == 0 || _allocated + size <= _memoryLimit) {
    return YES;
  }
  record("device_memory_refused", self,
         std::string(what) + " past the device's memory: " + std::to_string(_allocated) + " allocated + " +
             std::to_string(size) + " > " + std::to_string(_memoryLimit),
         @{@"size" : [NSNumber numberWithUnsignedLong:size]});
  return NO;
}
- (FakeMTLBuffer*)fakeBufferWithLength:(NSUInteger)length
                               storage:(MTLStorageMode)storage
                                 cache:(MTLCPUCacheMode)cache
                                hazard:(MTLHazardTrackingMode)hazard
                                  heap:(FakeMTLHeap*)heap {
  if (heap == nil && ![self fakeMayAllocate:length what:"newBufferWithLength:"]) {
    return nil;
  }
  FakeMTLBuffer* buffer = [[FakeMTLBuffer alloc] init];
  [buffer fakeOn:self storage:storage cache:cache hazard:hazard];
  buffer->_heap = [heap retain];
  buffer->_length = length;
  buffer->_allocated = heap != nil ? round_up(std::max<NSUInteger>(length, 1), [self fakeHeapAlignFor:storage]) : length;
  buffer->_gpu = static_cast<unsigned char*>(std::calloc(std::max<NSUInteger>(length, 1), 1));
  if (storage == MTLStorageModeShared) {
    buffer->_cpu = buffer->_gpu;
  } else if (storage == MTLStorageModeManaged) {
    buffer->_cpu = static_cast<unsigned char*>(std::calloc(std::max<NSUInteger>(length, 1), 1));
  }
  buffer->_usedBy = new std::vector<FakeMTLCommandBuffer*>();
  if (heap == nil) {
    _allocated += buffer->_allocated;
  }
  return buffer;
}
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  Guard g(lock());
  const MTLStorageMode storage = storage_of(options);
  // Apple: memoryless storage is for render-target textures on Apple GPUs; buffers never.
  if (storage == MTLStorageModeMemoryless) {
    record("buffer_memoryless_refused", self, "newBufferWithLength: with memoryless storage: buffers cannot be memoryless");
    return nil;
  }
  // Apple: managed storage exists on macOS; on Apple silicon it behaves as shared, but is still allowed.
  if (length == 0 || length > _maxBufferLength) {
    record("buffer_length_refused", self,
           "newBufferWithLength: " + std::to_string(length) + " bytes: must be 1 to maxBufferLength (" +
               std::to_string(_maxBufferLength) + ")");
    return nil;
  }
  return [self fakeBufferWithLength:length storage:storage cache:cache_of(options) hazard:hazard_of(options) heap:nil];
}
- (id<MTLBuffer>)newBufferWithBytes:(const void*)pointer length:(NSUInteger)length options:(MTLResourceOptions)options {
  FakeMTLBuffer* buffer = (FakeMTLBuffer*)[self newBufferWithLength:length options:options];
  if (buffer != nil) {
    // Apple: the bytes are copied into the new buffer's memory (both copies when managed).
    std::memcpy(buffer->_gpu, pointer, length);
    if (buffer->_cpu != nullptr && buffer->_cpu != buffer->_gpu) {
      std::memcpy(buffer->_cpu, pointer, length);
    }
  }
  return buffer;
}
- (MTLSizeAndAlign)heapBufferSizeAndAlignWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  // Apple (heapBufferSizeAndAlignWithLength:options:): the size and alignment of a buffer
  // made from a heap, for the options' storage (and hazard tracking) mode.
  const NSUInteger align = [self fakeHeapAlignFor:storage_of(options)];
  MTLSizeAndAlign out;
  out.size = round_up(std::max<NSUInteger>(length, 1), align);
  out.align = align;
  return out;
}
- (id<MTLHeap>)newHeapWithDescriptor:(MTLHeapDescriptor*)descriptor {
  Guard g(lock());
  const MTLStorageMode storage = [descriptor storageMode];
  // Apple (MTLHeapDescriptor.storageMode): on macOS, a GPU without Apple silicon can make
  // only private heaps; shared heaps need an Apple GPU (family Apple1 and later), and a
  // heap is never managed or memoryless there. Metal returns nil.
  if (storage != MTLStorageModePrivate && !(storage == MTLStorageModeShared && [self fakeIsAppleGPU])) {
    record("heap_storage_refused", self,
           std::string("newHeapWithDescriptor: with ") + mode_name(storage) +
               " storage: only private heaps on a GPU that is not an Apple GPU (MTLGPUFamilyApple1)",
           @{@"storage_mode" : ns(mode_name(storage)), @"size" : [NSNumber numberWithUnsignedLong:[descriptor size]]});
    return nil;
  }
  if ([descriptor size] == 0) {
    record("heap_size_refused", self, "newHeapWithDescriptor: with size 0");
    return nil;
  }
  if (![self fakeMayAllocate:round_up([descriptor size], kGranule) what:"newHeapWithDescriptor:"]) {
    return nil;
  }
  FakeMTLHeap* heap = [[FakeMTLHeap alloc] init];
  [heap fakeOn:self
       storage:storage
         cache:[descriptor cpuCacheMode]
        hazard:[descriptor hazardTrackingMode] == MTLHazardTrackingModeDefault ? MTLHazardTrackingModeTracked
                                                                                : [descriptor hazardTrackingMode]];
  heap->_size = round_up([descriptor size], kGranule);
  heap->_type = [descriptor type];
  _allocated += heap->_size;
  return heap;
}
@end

@implementation MTLHeapDescriptor
- (instancetype)init {
  if ((self = [super init])) {
    // Apple: the default storage mode of a heap descriptor is private on macOS.
    _fakeStorage = MTLStorageModePrivate;
  }
  return self;
}
- (id)copyWithZone:(NSZone*)zone {
  MTLHeapDescriptor* copy = [[MTLHeapDescriptor alloc] init];
  [copy setSize:_fakeSize];
  [copy setResourceOptions:[self resourceOptions]];
  [copy setType:_fakeType];
  return copy;
}
- (NSUInteger)size {
  return _fakeSize;
}
- (void)setSize:(NSUInteger)size {
  _fakeSize = size;
}
- (MTLStorageMode)storageMode {
  return _fakeStorage;
}
- (void)setStorageMode:(MTLStorageMode)mode {
  _fakeStorage = mode;
}
- (MTLCPUCacheMode)cpuCacheMode {
  return _fakeCache;
}
- (void)setCpuCacheMode:(MTLCPUCacheMode)mode {
  _fakeCache = mode;
}
- (MTLHazardTrackingMode)hazardTrackingMode {
  return _fakeHazard;
}
- (void)setHazardTrackingMode:(MTLHazardTrackingMode)mode {
  _fakeHazard = mode;
}
- (MTLHeapType)type {
  return _fakeType;
}
- (void)setType:(MTLHeapType)type {
  _fakeType = type;
}
- (MTLResourceOptions)resourceOptions {
  return pack(_fakeStorage, _fakeCache, _fakeHazard);
}
- (void)setResourceOptions:(MTLResourceOptions)options {
  _fakeStorage = storage_of(options);
  _fakeCache = cache_of(options);
  _fakeHazard = hazard_of(options);
}
@end

@implementation FakeMTLResource
- (void)fakeOn:(FakeMTLDevice*)device
       storage:(MTLStorageMode)storage
         cache:(MTLCPUCacheMode)cache
        hazard:(MTLHazardTrackingMode)hazard {
  _device = [device retain];
  _storage = storage;
  _cache = cache;
  _hazard = hazard;
  _purgeable = MTLPurgeableStateNonVolatile;
}
- (void)dealloc {
  [_device release];
  [_label release];
  [super dealloc];
}
- (NSString*)label {
  return _label;
}
- (void)setLabel:(NSString*)label {
  [_label release];
  _label = [label copy];
}
- (id<MTLDevice>)device {
  return _device;
}
- (MTLStorageMode)storageMode {
  return _storage;
}
- (MTLCPUCacheMode)cpuCacheMode {
  return _cache;
}
- (MTLHazardTrackingMode)hazardTrackingMode {
  return _hazard;
}
- (MTLResourceOptions)resourceOptions {
  return pack(_storage, _cache, _hazard);
}
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state {
  const MTLPurgeableState previous = _purgeable;
  if (state != MTLPurgeableStateKeepCurrent) {
    _purgeable = state;
  }
  return previous;
}
@end

@implementation FakeMTLHeap
// Apple (MTLHeap newBufferWithLength:options:[offset:]): the options' storage mode and CPU
// cache mode must match the heap's. Metal's validation stops the program; the stand-in
// returns nil and records it. Called with the lock held.
- (BOOL)fakeMatches:(MTLResourceOptions)options in:(const char*)call {
  if (storage_of(options) == _storage && cache_of(options) == _cache) {
    return YES;
  }
  record("heap_buffer_storage_mismatch", _device,
         std::string("heap ") + call + " asked for " + mode_name(storage_of(options)) + " storage from a " +
             mode_name(_storage) + " heap (or another CPU cache mode)",
         @{@"heap_storage_mode" : ns(mode_name(_storage)), @"storage_mode" : ns(mode_name(storage_of(options)))});
  return NO;
}
- (void)dealloc {
  {
    Guard g(lock());
    _device->_allocated -= _size;
  }
  [super dealloc];
}
- (MTLHeapType)type {
  return _type;
}
- (NSUInteger)size {
  return _size;
}
- (NSUInteger)usedSize {
  return _used;
}
- (NSUInteger)currentAllocatedSize {
  return _size;
}
- (NSUInteger)maxAvailableSizeWithAlignment:(NSUInteger)alignment {
  const NSUInteger free = _size - _used;
  return alignment == 0 ? free : free / alignment * alignment;
}
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  Guard g(lock());
  if (![self fakeMatches:options in:"newBufferWithLength:"]) {
    return nil;
  }
  const NSUInteger need = round_up(std::max<NSUInteger>(length, 1), [_device fakeHeapAlignFor:_storage]);
  // Apple: nil when the heap has not enough room left (a program asks maxAvailableSize first).
  if (need > _size - _used || _purgeable == MTLPurgeableStateEmpty) {
    record("heap_full", _device,
           "heap newBufferWithLength: " + std::to_string(length) + " bytes: " + std::to_string(_size - _used) +
               " of " + std::to_string(_size) + " left");
    return nil;
  }
  _used += need;
  const MTLHazardTrackingMode hazard = hazard_of(options) == MTLHazardTrackingModeDefault ? _hazard : hazard_of(options);
  return [_device fakeBufferWithLength:length storage:_storage cache:_cache hazard:hazard heap:self];
}
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                             options:(MTLResourceOptions)options
                              offset:(NSUInteger)offset {
  Guard g(lock());
  // Apple (newBufferWithLength:options:offset:): placement heaps only; the same storage
  // and CPU cache mode as the heap; the range must lie inside the heap.
  if (_type != MTLHeapTypePlacement) {
    record("heap_placement_not_placement", _device,
           "newBufferWithLength:options:offset: on a heap that is not a placement heap");
    return nil;
  }
  if (![self fakeMatches:options in:"newBufferWithLength:options:offset:"]) {
    return nil;
  }
  if (offset > _size || std::max<NSUInteger>(length, 1) > _size - offset) {
    record("heap_placement_out_of_bounds", _device,
           "placement of " + std::to_string(length) + " bytes at " + std::to_string(offset) + " in a heap of " +
               std::to_string(_size));
    return nil;
  }
  // Apple: a buffer made from a heap has the alignment heapBufferSizeAndAlignWithLength:options:
  // gives for it; on a placement heap the program picks the offset, and Metal does not move
  // a misaligned one. The buffer is made (as Metal would) and the misplacement recorded.
  const NSUInteger align = [_device heapBufferSizeAndAlignWithLength:length options:options].align;
  if (offset % align != 0) {
    record("heap_placement_misaligned", _device,
           "placement of " + std::to_string(length) + " " + mode_name(_storage) + " bytes at offset " +
               std::to_string(offset) + ", not a multiple of its alignment " + std::to_string(align),
           @{@"offset" : [NSNumber numberWithUnsignedLong:offset], @"align" : [NSNumber numberWithUnsignedLong:align],
             @"storage_mode" : ns(mode_name(_storage))});
  }
  const MTLHazardTrackingMode hazard = hazard_of(options) == MTLHazardTrackingModeDefault ? _hazard : hazard_of(options);
  FakeMTLBuffer* buffer = [_device fakeBufferWithLength:length storage:_storage cache:_cache hazard:hazard heap:self];
  _used += buffer->_allocated; // given back when the buffer is deallocated, as for any heap buffer
  return buffer;
}
@end

@implementation FakeMTLBuffer
- (void)dealloc {
  {
    Guard g(lock());
    if (!_usedBy->empty()) {
      // Apple: a command buffer made with unretained references does not keep its
      // resources alive; the program must keep them until it completes.
      record("buffer_freed_while_in_use", _device,
             "a buffer of " + std::to_string(_length) + " bytes was deallocated while " +
                 std::to_string(_usedBy->size()) + " uncompleted command buffer(s) use it");
      for (FakeMTLCommandBuffer* cb : *_usedBy) {
        auto& uses = *cb->_uses;
        uses.erase(std::remove(uses.begin(), uses.end(), self), uses.end());
        for (auto& command : *cb->_commands) {
          if (command.source == self) command.source = nil;
          if (command.destination == self) command.destination = nil;
        }
      }
    }
    if (_heap != nil) {
      _heap->_used -= _allocated;
    } else {
      _device->_allocated -= _allocated;
    }
  }
  if (_cpu != nullptr && _cpu != _gpu) {
    std::free(_cpu);
  }
  std::free(_gpu);
  delete _usedBy;
  [_heap release];
  [super dealloc];
}
- (id<MTLHeap>)heap {
  return _heap;
}
- (NSUInteger)allocatedSize {
  return _allocated;
}
- (NSUInteger)length {
  return _length;
}
- (void*)contents {
  // Apple (MTLBuffer.contents): a buffer in private storage has no CPU address; contents
  // returns NULL. Dereferencing it is the caller's crash; the stand-in records the call.
  if (_storage == MTLStorageModePrivate) {
    record("private_contents", _device, "contents of a private buffer of " + std::to_string(_length) + " bytes: NULL");
    return nullptr;
  }
  if (_purgeable == MTLPurgeableStateEmpty || (_heap != nil && _heap->_purgeable == MTLPurgeableStateEmpty)) {
    record("purged_contents", _device, "contents of a buffer whose memory was discarded (purgeable state Empty)");
  }
  return _cpu;
}
- (void)didModifyRange:(NSRange)range {
  Guard g(lock());
  // Apple (didModifyRange:): for managed buffers only; tells Metal the CPU changed these
  // bytes, so the GPU's copy is updated before the GPU next reads it.
  if (_storage != MTLStorageModeManaged) {
    record("did_modify_range_not_managed", _device,
           std::string("didModifyRange: on a ") + mode_name(_storage) + " buffer: only managed buffers have two copies");
    return;
  }
  if (range.location + range.length > _length) {
    record("did_modify_range_out_of_bounds", _device,
           "didModifyRange: {" + std::to_string(range.location) + ", " + std::to_string(range.length) +
               "} past the buffer's " + std::to_string(_length) + " bytes");
    return;
  }
  std::memcpy(_gpu + range.location, _cpu + range.location, range.length);
  record("did_modify_range", _device,
         "didModifyRange: {" + std::to_string(range.location) + ", " + std::to_string(range.length) + "}",
         @{@"location" : [NSNumber numberWithUnsignedLong:range.location],
           @"length" : [NSNumber numberWithUnsignedLong:range.length]});
}
@end

@implementation FakeMTLCommandQueue
- (void)dealloc {
  [_device release];
  [super dealloc];
}
- (id<MTLDevice>)device {
  return _device;
}
- (FakeMTLCommandBuffer*)fakeCommandBuffer:(BOOL)retained {
  FakeMTLCommandBuffer* cb = [[FakeMTLCommandBuffer alloc] init];
  cb->_device = [_device retain];
  cb->_queue = [self retain];
  cb->_retained = retained;
  cb->_commands = new std::vector<FakeCommand>();
  cb->_uses = new std::vector<FakeMTLBuffer*>();
  cb->_completed = new std::vector<MTLCommandBufferHandler>();
  cb->_scheduled = new std::vector<MTLCommandBufferHandler>();
  return [cb autorelease];
}
// Apple: command buffers are autoreleased; commandBuffer retains the resources its
// commands use until it completes, commandBufferWithUnretainedReferences does not.
- (id<MTLCommandBuffer>)commandBuffer {
  return [self fakeCommandBuffer:YES];
}
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences {
  return [self fakeCommandBuffer:NO];
}
@end

// Metal runs a command buffer's handlers on a thread of its own, never on the thread that
// committed or waits for it. The stand-in runs them on a new thread and waits for it, at
// most handler_timeout_seconds(): a handler that waits for something the completing thread
// holds (a lock, a serial queue) deadlocks on a Mac; here run_on_handler_thread returns
// false and leaves the thread behind (the caller records handler_blocked).
// FAKE_METAL_HANDLER_TIMEOUT (seconds) shortens the wait for tests that expect the block.
int handler_timeout_seconds() {
  const char* env = std::getenv("FAKE_METAL_HANDLER_TIMEOUT");
  const int value = env != nullptr ? std::atoi(env) : 0;
  return value > 0 ? value : 20;
}

bool run_on_handler_thread(void (^work)(void)) {
  struct Done {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  void (^copied)(void) = Block_copy(work);
  std::thread handler([done, copied] {
    copied();
    Block_release(copied);
    std::lock_guard<std::mutex> g(done->mutex);
    done->done = true;
    done->cv.notify_all();
  });
  std::unique_lock<std::mutex> wait(done->mutex);
  if (!done->cv.wait_for(wait, std::chrono::seconds(handler_timeout_seconds()), [&] { return done->done; })) {
    handler.detach();
    return false;
  }
  wait.unlock();
  handler.join();
  return true;
}

@implementation FakeMTLCommandBuffer
- (void)dealloc {
  for (MTLCommandBufferHandler h : *_completed) Block_release(h);
  for (MTLCommandBufferHandler h : *_scheduled) Block_release(h);
  [self fakeForgetUses];
  delete _commands;
  delete _uses;
  delete _completed;
  delete _scheduled;
  [_queue release];
  [_device release];
  [super dealloc];
}
- (void)fakeEndUses {
  Guard g(lock());
  for (FakeMTLBuffer* buffer : *_uses) {
    auto& by = *buffer->_usedBy;
    by.erase(std::remove(by.begin(), by.end(), self), by.end());
  }
  if (!_retained) {
    // Not ours: a completed handler may deallocate them, so they are not touched again.
    _uses->clear();
  }
}
- (void)fakeForgetUses {
  Guard g(lock());
  std::vector<FakeMTLBuffer*> uses;
  uses.swap(*_uses);
  for (FakeMTLBuffer* buffer : uses) {
    auto& by = *buffer->_usedBy;
    by.erase(std::remove(by.begin(), by.end(), self), by.end());
  }
  if (_retained) {
    for (FakeMTLBuffer* buffer : uses) [buffer release];
  }
}
- (id<MTLDevice>)device {
  return _device;
}
- (id<MTLCommandQueue>)commandQueue {
  return _queue;
}
- (MTLCommandBufferStatus)status {
  return _status;
}
- (BOOL)retainedReferences {
  return _retained;
}
- (void)fakeUse:(FakeMTLBuffer*)buffer {
  if (buffer == nil || std::find(_uses->begin(), _uses->end(), buffer) != _uses->end()) {
    return;
  }
  _uses->push_back(_retained ? [buffer retain] : buffer);
  buffer->_usedBy->push_back(self);
}
- (void)addCompletedHandler:(MTLCommandBufferHandler)block {
  Guard g(lock());
  // Apple: handlers are added before commit.
  if (_status >= MTLCommandBufferStatusCommitted) {
    record("handler_after_commit", _device, "addCompletedHandler: on a committed command buffer");
    return;
  }
  _completed->push_back(Block_copy(block));
}
- (void)addScheduledHandler:(MTLCommandBufferHandler)block {
  Guard g(lock());
  if (_status >= MTLCommandBufferStatusCommitted) {
    record("handler_after_commit", _device, "addScheduledHandler: on a committed command buffer");
    return;
  }
  _scheduled->push_back(Block_copy(block));
}
- (void)enqueue {
  if (_status == MTLCommandBufferStatusNotEnqueued) {
    _status = MTLCommandBufferStatusEnqueued;
  }
}
- (void)commit {
  Guard g(lock());
  if (_status >= MTLCommandBufferStatusCommitted) {
    record("commit_twice", _device, "commit of a command buffer that was already committed");
    return;
  }
  if (_openEncoders > 0) {
    record("encoder_not_ended", _device, "commit while an encoder has not called endEncoding");
  }
  _status = MTLCommandBufferStatusCommitted;
  pending().push_back([self retain]);
  record("command_buffer_committed", _device, std::to_string(_commands->size()) + " command(s)");
}
- (void)waitUntilScheduled {
  if (_status >= MTLCommandBufferStatusCommitted) {
    [self waitUntilCompleted];
  }
}
// The stand-in's GPU runs a command buffer when it is completed: by this wait, or by the
// test control fake_metal_complete_command_buffers(). A wait on a buffer never committed
// would block forever on a Mac; the stand-in records it and returns.
- (void)waitUntilCompleted {
  if (_status < MTLCommandBufferStatusCommitted) {
    record("wait_before_commit", _device, "waitUntilCompleted on a command buffer that was not committed");
    return;
  }
  if (_status == MTLCommandBufferStatusCompleted) {
    return;
  }
  [self fakeComplete];
}
- (void)fakeRun {
  for (const FakeCommand& c : *_commands) {
    switch (c.kind) {
      case FakeCommand::copy:
        if (c.source != nil && c.destination != nil) {
          std::memmove(c.destination->_gpu + c.destination_offset, c.source->_gpu + c.source_offset, c.size);
        }
        break;
      case FakeCommand::fill:
        if (c.destination != nil) {
          std::memset(c.destination->_gpu + c.destination_offset, c.value, c.size);
        }
        break;
      case FakeCommand::sync:
        if (c.destination != nil && c.destination->_storage == MTLStorageModeManaged) {
          std::memcpy(c.destination->_cpu, c.destination->_gpu, c.destination->_length);
        }
        break;
    }
  }
}
- (void)fakeComplete {
  [self retain];
  {
    Guard g(lock());
    auto& list = pending();
    auto found = std::find(list.begin(), list.end(), self);
    if (found != list.end()) {
      list.erase(found);
      [self release];  // the pending list's reference; `self` is still held above
    }
    [self fakeRun];
    _status = MTLCommandBufferStatusCompleted;
  }
  // Apple (addCompletedHandler:): the handlers run after the GPU finished the command
  // buffer's commands, so its buffers are no longer in use there: a handler may free them
  // (upstream's allocator returns blocks that way). Retained references go after.
  [self fakeEndUses];
  if (!run_on_handler_thread(^{
        @autoreleasepool {
          for (MTLCommandBufferHandler h : *_scheduled) h(self);
          for (MTLCommandBufferHandler h : *_completed) h(self);
        }
      })) {
    // the handlers may still use `self` and its buffers: both are kept alive
    record("handler_blocked", _device,
           "the command buffer's handlers did not return within " + std::to_string(handler_timeout_seconds()) +
               " s (on a Mac, a handler waiting for what the completing thread holds never returns)");
    return;
  }
  [self fakeForgetUses];
  record("command_buffer_completed", _device, std::to_string(_commands->size()) + " command(s)");
  [self release];
}
- (id<MTLBlitCommandEncoder>)blitCommandEncoder {
  Guard g(lock());
  if (_status >= MTLCommandBufferStatusCommitted) {
    record("encode_after_commit", _device, "blitCommandEncoder of a committed command buffer");
    return nil;
  }
  FakeMTLBlitCommandEncoder* encoder = [[FakeMTLBlitCommandEncoder alloc] init];
  encoder->_commandBuffer = [self retain];
  ++_openEncoders;
  return [encoder autorelease];
}
@end

@implementation FakeMTLBlitCommandEncoder
- (void)dealloc {
  [_commandBuffer release];
  [super dealloc];
}
- (id<MTLDevice>)device {
  return _commandBuffer->_device;
}
- (void)endEncoding {
  if (!_ended) {
    _ended = YES;
    --_commandBuffer->_openEncoders;
  }
}
- (BOOL)fakeInBounds:(FakeMTLBuffer*)buffer offset:(NSUInteger)offset size:(NSUInteger)size what:(const char*)what {
  if (buffer == nil || offset + size > buffer->_length) {
    record("blit_out_of_bounds", _commandBuffer->_device,
           std::string("blit ") + what + ": " + std::to_string(offset) + " + " + std::to_string(size) +
               " bytes outside a buffer of " + std::to_string(buffer != nil ? buffer->_length : 0));
    return NO;
  }
  return YES;
}
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size {
  Guard g(lock());
  FakeMTLBuffer* source = as_buffer(sourceBuffer);
  FakeMTLBuffer* destination = as_buffer(destinationBuffer);
  if (![self fakeInBounds:source offset:sourceOffset size:size what:"source"] ||
      ![self fakeInBounds:destination offset:destinationOffset size:size what:"destination"]) {
    return;
  }
  [_commandBuffer fakeUse:source];
  [_commandBuffer fakeUse:destination];
  _commandBuffer->_commands->push_back({FakeCommand::copy, source, sourceOffset, destination, destinationOffset, size, 0});
}
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value {
  Guard g(lock());
  FakeMTLBuffer* destination = as_buffer(buffer);
  if (![self fakeInBounds:destination offset:range.location size:range.length what:"fill"]) {
    return;
  }
  [_commandBuffer fakeUse:destination];
  _commandBuffer->_commands->push_back({FakeCommand::fill, nil, 0, destination, range.location, range.length, value});
}
- (void)synchronizeResource:(id<MTLResource>)resource {
  Guard g(lock());
  FakeMTLBuffer* buffer = as_buffer(resource);
  // Apple (synchronizeResource:): for managed resources; after the command buffer
  // completes, the CPU copy holds what the GPU wrote.
  if (buffer == nil || buffer->_storage != MTLStorageModeManaged) {
    record("synchronize_not_managed", _commandBuffer->_device,
           std::string("synchronizeResource: on a ") + (buffer != nil ? mode_name(buffer->_storage) : "non-buffer") +
               " resource: only managed resources have a CPU copy to update");
    return;
  }
  [_commandBuffer fakeUse:buffer];
  _commandBuffer->_commands->push_back({FakeCommand::sync, nil, 0, buffer, 0, buffer->_length, 0});
}
@end

// --- MPSGraph: only what the lines' macOS probe asks ----------------------------------------

// 2.6.0 to 2.14.1 gate MPS on the macOS version by asking whether MPSGraph instances
// respond to a selector that macOS added in the version the line needs. The stand-in's
// MPSGraph answers from the configuration ("mpsgraph") and records what was asked.
@interface MPSGraph : NSObject
@end

@implementation MPSGraph
+ (BOOL)instancesRespondToSelector:(SEL)selector {
  const char* name = sel_getName(selector);
  record("mpsgraph_probe", nil, std::string("MPSGraph instancesRespondToSelector: ") + name,
         @{@"selector" : [NSString stringWithUTF8String:name],
           @"answer" : [NSNumber numberWithBool:config().mpsgraph]});
  return config().mpsgraph ? YES : NO;
}
@end

@implementation NSProcessInfo (FakeMetalMacOSVersion)
- (NSOperatingSystemVersion)operatingSystemVersion {
  NSOperatingSystemVersion v;
  v.majorVersion = config().macos_major;
  v.minorVersion = config().macos_minor;
  v.patchVersion = config().macos_patch;
  return v;
}
- (BOOL)isOperatingSystemAtLeastVersion:(NSOperatingSystemVersion)version {
  const Config& c = config();
  if (c.macos_major != version.majorVersion) return c.macos_major > version.majorVersion;
  if (c.macos_minor != version.minorVersion) return c.macos_minor > version.minorVersion;
  return c.macos_patch >= version.patchVersion;
}
@end

// --- configuration -------------------------------------------------------------------------

namespace {

const std::map<std::string, NSInteger>& family_names() {
  static const std::map<std::string, NSInteger> names = {
      {"Apple1", MTLGPUFamilyApple1}, {"Apple2", MTLGPUFamilyApple2}, {"Apple3", MTLGPUFamilyApple3},
      {"Apple4", MTLGPUFamilyApple4}, {"Apple5", MTLGPUFamilyApple5}, {"Apple6", MTLGPUFamilyApple6},
      {"Apple7", MTLGPUFamilyApple7}, {"Apple8", MTLGPUFamilyApple8}, {"Apple9", MTLGPUFamilyApple9},
      {"Mac1", MTLGPUFamilyMac1},     {"Mac2", MTLGPUFamilyMac2},     {"Common1", MTLGPUFamilyCommon1},
      {"Common2", MTLGPUFamilyCommon2}, {"Common3", MTLGPUFamilyCommon3},
      {"MacCatalyst1", MTLGPUFamilyMacCatalyst1}, {"MacCatalyst2", MTLGPUFamilyMacCatalyst2},
      {"Metal3", MTLGPUFamilyMetal3},
  };
  return names;
}

struct BadConfig {
  std::string what;
};

bool is_number(id value) {
  return [value isKindOfClass:[NSNumber class]];
}

template <typename T>
T number(NSDictionary* dict, NSString* key, T fallback, const std::string& where) {
  id value = [dict objectForKey:key];
  if (value == nil || value == [NSNull null]) {
    return fallback;
  }
  if (!is_number(value)) {
    throw BadConfig{where + "." + [key UTF8String] + " must be a number or true/false"};
  }
  return static_cast<T>([value unsignedLongLongValue]);
}

void check_keys(NSDictionary* dict, NSArray* known, const std::string& where) {
  for (NSString* key in dict) {
    if (![known containsObject:key]) {
      throw BadConfig{where + ": unknown key '" + [key UTF8String] + "' (known: " +
                      [[known componentsJoinedByString:@", "] UTF8String] + ")"};
    }
  }
}

// "heap_alignment": {"private": 65536, "shared": 256, ...}: what heapBufferSizeAndAlignWithLength:
// answers per storage mode on this device (powers of two; modes left out answer kGranule).
void heap_alignment_from(NSDictionary* d, FakeMTLDevice* device, const std::string& where) {
  id spec = [d objectForKey:@"heap_alignment"];
  if (spec == nil) {
    return;
  }
  const std::string at = where + ".heap_alignment";
  if (![spec isKindOfClass:[NSDictionary class]]) {
    throw BadConfig{at + " must be an object such as {\"private\": 65536, \"shared\": 256}"};
  }
  const struct {
    NSString* name;
    MTLStorageMode mode;
  } modes[] = {{@"shared", MTLStorageModeShared}, {@"managed", MTLStorageModeManaged},
               {@"private", MTLStorageModePrivate}};
  check_keys(spec, @[ @"shared", @"managed", @"private" ], at);
  for (const auto& m : modes) {
    const NSUInteger align = number<NSUInteger>(spec, m.name, 0, at);
    if ([spec objectForKey:m.name] != nil && (align == 0 || (align & (align - 1)) != 0)) {
      throw BadConfig{at + "." + [m.name UTF8String] + " must be a power of two"};
    }
    device->_heapAlign[static_cast<NSUInteger>(m.mode)] = align;
  }
}

FakeMTLDevice* device_from(NSDictionary* d, size_t index) {
  const std::string where = "devices[" + std::to_string(index) + "]";
  if (![d isKindOfClass:[NSDictionary class]]) {
    throw BadConfig{where + " must be an object"};
  }
  check_keys(d,
             @[ @"name", @"registry_id", @"low_power", @"removable", @"headless", @"unified_memory",
                @"recommended_working_set", @"families", @"metal_version", @"gpu_core_count",
                @"max_buffer_length", @"memory_limit", @"heap_alignment", @"thread_execution_width",
                @"max_threads_per_threadgroup", @"max_threadgroup_memory", @"pipeline_failures" ],
             where);
  id name = [d objectForKey:@"name"];
  if (![name isKindOfClass:[NSString class]]) {
    throw BadConfig{where + ".name is required and must be a string"};
  }
  if (![[d objectForKey:@"registry_id"] isKindOfClass:[NSNumber class]]) {
    throw BadConfig{where + ".registry_id is required and must be a number"};
  }
  FakeMTLDevice* device = [[[FakeMTLDevice alloc] init] autorelease];
  device->_name = [name copy];
  device->_registryID = number<uint64_t>(d, @"registry_id", 0, where);
  device->_lowPower = number<int>(d, @"low_power", 0, where) != 0;
  device->_removable = number<int>(d, @"removable", 0, where) != 0;
  device->_headless = number<int>(d, @"headless", 0, where) != 0;
  device->_unified = number<int>(d, @"unified_memory", 0, where) != 0;
  device->_workingSet = number<uint64_t>(d, @"recommended_working_set", 4ULL << 30, where);
  device->_maxBufferLength = number<NSUInteger>(d, @"max_buffer_length", 0, where);
  device->_memoryLimit = number<uint64_t>(d, @"memory_limit", 0, where);
  heap_alignment_from(d, device, where);
  if (device->_maxBufferLength == 0) {
    device->_maxBufferLength = device->_workingSet;
  }
  device->_coreCount = number<int>(d, @"gpu_core_count", 0, where);
  device->_executionWidth = number<NSUInteger>(d, @"thread_execution_width", 32, where);
  device->_maxThreadsPerThreadgroup = number<NSUInteger>(d, @"max_threads_per_threadgroup", 1024, where);
  device->_threadgroupMemory = number<NSUInteger>(d, @"max_threadgroup_memory", 32768, where);
  id failures = [d objectForKey:@"pipeline_failures"];
  if (failures != nil && ![failures isKindOfClass:[NSDictionary class]]) {
    throw BadConfig{where + ".pipeline_failures must map function names to Metal's messages"};
  }
  device->_pipelineFailures = [(failures != nil ? failures : [NSDictionary dictionary]) copy];
  device->_families = new std::vector<NSInteger>();
  id families = [d objectForKey:@"families"];
  if (families != nil && ![families isKindOfClass:[NSArray class]]) {
    throw BadConfig{where + ".families must be a list of names such as \"Mac2\" or \"Apple7\""};
  }
  for (id family in (NSArray*)families) {
    auto found = [family isKindOfClass:[NSString class]] ? family_names().find([family UTF8String])
                                                          : family_names().end();
    if (found == family_names().end()) {
      std::string names;
      for (const auto& entry : family_names()) names += (names.empty() ? "" : ", ") + entry.first;
      throw BadConfig{where + ".families: unknown GPU family " +
                      ([family isKindOfClass:[NSString class]] ? std::string("'") + [family UTF8String] + "'"
                                                                : std::string("(not a string)")) +
                      " (known: " + names + ")"};
    }
    device->_families->push_back(found->second);
  }
  id version = [d objectForKey:@"metal_version"];
  if (version != nil && ![version isKindOfClass:[NSString class]]) {
    throw BadConfig{where + ".metal_version must be a string such as \"3.1\""};
  }
  device->_metalVersion = [(version != nil ? version : @"") copy];
  return device;
}

void parse_macos(id value) {
  if (value == nil) return;
  if (![value isKindOfClass:[NSString class]]) {
    throw BadConfig{"macos must be a string such as \"14.0\""};
  }
  NSArray* parts = [(NSString*)value componentsSeparatedByString:@"."];
  if ([parts count] < 1 || [parts count] > 3) {
    throw BadConfig{std::string("macos '") + [value UTF8String] + "' is not MAJOR[.MINOR[.PATCH]]"};
  }
  NSInteger numbers[3] = {0, 0, 0};
  for (NSUInteger i = 0; i < [parts count]; ++i) {
    NSString* part = [parts objectAtIndex:i];
    if ([part length] == 0 || [[part stringByTrimmingCharactersInSet:[NSCharacterSet decimalDigitCharacterSet]] length]) {
      throw BadConfig{std::string("macos '") + [value UTF8String] + "' is not MAJOR[.MINOR[.PATCH]]"};
    }
    numbers[i] = [part integerValue];
  }
  config().macos_major = numbers[0];
  config().macos_minor = numbers[1];
  config().macos_patch = numbers[2];
}

int configure(const char* json) {
  Guard g(lock());
  @autoreleasepool {
    NSData* data = [NSData dataWithBytes:json length:std::strlen(json)];
    NSError* error = nil;
    id root = [NSJSONSerialization JSONObjectWithData:data options:0 error:&error];
    try {
      if (![root isKindOfClass:[NSDictionary class]]) {
        throw BadConfig{"the configuration must be a JSON object (see fake_metal.h)"};
      }
      check_keys(root, @[ @"devices", @"system_default", @"macos", @"mpsgraph" ], "configuration");
      NSMutableArray* devices = [NSMutableArray array];
      id list = [root objectForKey:@"devices"];
      if (list != nil && ![list isKindOfClass:[NSArray class]]) {
        throw BadConfig{"devices must be a list"};
      }
      std::vector<uint64_t> ids;
      for (NSUInteger i = 0; i < [(NSArray*)list count]; ++i) {
        FakeMTLDevice* device = device_from([(NSArray*)list objectAtIndex:i], i);
        if (std::find(ids.begin(), ids.end(), device->_registryID) != ids.end()) {
          throw BadConfig{"devices[" + std::to_string(i) + "].registry_id repeats another device's"};
        }
        ids.push_back(device->_registryID);
        [devices addObject:device];
      }
      Config fresh;
      const Config previous = config();
      id system = [root objectForKey:@"system_default"];
      if (system == nil) {
        fresh.system_default = [devices count] > 0 ? 0 : -1;
      } else if (system == [NSNull null]) {
        fresh.system_default = -1;
      } else if (!is_number(system) || [system integerValue] < 0 ||
                 (NSUInteger)[system integerValue] >= [devices count]) {
        throw BadConfig{"system_default must be null or the index of a configured device"};
      } else {
        fresh.system_default = [system integerValue];
      }
      id graph = [root objectForKey:@"mpsgraph"];
      if (graph != nil && !is_number(graph)) {
        throw BadConfig{"mpsgraph must be true or false"};
      }
      fresh.mpsgraph = graph == nil ? true : [graph boolValue];
      config() = fresh;
      try {
        parse_macos([root objectForKey:@"macos"]);
      } catch (...) {
        config() = previous;
        throw;
      }
      [devices_list() setArray:devices];
      configured() = true;
    } catch (const BadConfig& bad) {
      last_error() = "fake_metal_configure: " + bad.what;
      if (root == nil) {
        last_error() = std::string("fake_metal_configure: not JSON: ") +
            (error != nil ? [[error localizedDescription] UTF8String] : "unreadable");
      }
      return -1;
    }
  }
  return 0;
}

void configure_from_environment() {
  if (configured()) return;
  configured() = true;
  const char* text = std::getenv("FAKE_METAL_CONFIG");
  if (text != nullptr && configure(text) != 0) {
    std::fprintf(stderr, "%s (FAKE_METAL_CONFIG)\n", last_error().c_str());
    std::abort();
  }
}

} // namespace

// --- Metal's functions ---------------------------------------------------------------------

extern "C" NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) {
  Guard g(lock());
  configure_from_environment();
  record("copy_all_devices", nil, std::to_string([devices_list() count]) + " device(s)");
  return [[NSArray alloc] initWithArray:devices_list()];
}

extern "C" id<MTLDevice> MTLCreateSystemDefaultDevice(void) {
  Guard g(lock());
  configure_from_environment();
  if (config().system_default < 0) {
    return nil;
  }
  return [[devices_list() objectAtIndex:config().system_default] retain];
}

// --- IOKit ---------------------------------------------------------------------------------

extern "C" {
const mach_port_t kIOMainPortDefault = 0;
const mach_port_t kIOMasterPortDefault = 0;
const CFAllocatorRef kCFAllocatorDefault = nullptr;

// CF objects of the stand-in are Objective-C objects (NSString, NSNumber, NSDictionary),
// as toll-free bridging makes them on macOS.
CFStringRef FakeMetalCFString(const char* text) {
  static std::map<std::string, NSString*> constants;  // CFSTR constants live forever
  Guard g(lock());
  NSString*& s = constants[text];
  if (s == nil) s = [[NSString alloc] initWithUTF8String:text];
  return (CFStringRef)(void*)s;
}

CFMutableDictionaryRef IOServiceMatching(const char* name) {
  NSMutableDictionary* d = [[NSMutableDictionary alloc] init];
  [d setObject:[NSString stringWithUTF8String:name] forKey:@"IOProviderClass"];
  return (CFMutableDictionaryRef)(void*)d;
}

extern "C++" {
namespace {
// Iterators and entries: small integers into these tables.
std::vector<std::vector<io_object_t>>& iterators() {
  static std::vector<std::vector<io_object_t>> all;
  return all;
}
}  // namespace
}

kern_return_t IOServiceGetMatchingServices(mach_port_t, CFDictionaryRef matching, io_iterator_t* existing) {
  Guard g(lock());
  configure_from_environment();
  NSDictionary* d = (NSDictionary*)(void*)matching;
  std::vector<io_object_t> entries;
  // Apple GPUs register an AGXAccelerator service; Intel and AMD GPUs do not.
  if ([[d objectForKey:@"IOProviderClass"] isEqual:@"AGXAccelerator"]) {
    for (NSUInteger i = 0; i < [devices_list() count]; ++i) {
      FakeMTLDevice* device = [devices_list() objectAtIndex:i];
      if ([device fakeIsAppleGPU]) entries.push_back(static_cast<io_object_t>(0x1000 + i));
    }
  }
  [d release];  // Apple: IOServiceGetMatchingServices consumes the matching dictionary
  iterators().push_back(entries);
  *existing = static_cast<io_iterator_t>(iterators().size());
  return KERN_SUCCESS;
}

io_object_t IOIteratorNext(io_iterator_t iterator) {
  Guard g(lock());
  if (iterator == 0 || iterator > iterators().size()) return 0;
  auto& entries = iterators()[iterator - 1];
  if (entries.empty()) return 0;
  const io_object_t next = entries.front();
  entries.erase(entries.begin());
  return next;
}

CFTypeRef IORegistryEntryCreateCFProperty(io_registry_entry_t entry, CFStringRef key, CFAllocatorRef, IOOptionBits) {
  Guard g(lock());
  const NSUInteger index = entry >= 0x1000 ? entry - 0x1000 : NSNotFound;
  if (index >= [devices_list() count] || ![(NSString*)(void*)key isEqual:@"gpu-core-count"]) return nullptr;
  FakeMTLDevice* device = [devices_list() objectAtIndex:index];
  return (CFTypeRef)(void*)[[NSNumber alloc] initWithInt:device->_coreCount];
}

CFTypeRef IORegistryEntrySearchCFProperty(io_registry_entry_t entry, const char*, CFStringRef key,
                                          CFAllocatorRef allocator, IOOptionBits options) {
  return IORegistryEntryCreateCFProperty(entry, key, allocator, options);
}

kern_return_t IOObjectRelease(io_object_t) {
  return KERN_SUCCESS;
}
CFTypeID CFNumberGetTypeID(void) {
  return 1;
}
CFTypeID CFGetTypeID(CFTypeRef cf) {
  return [(id)(void*)cf isKindOfClass:[NSNumber class]] ? 1 : 0;
}
Boolean CFNumberGetValue(CFNumberRef number, CFNumberType type, void* value) {
  NSNumber* n = (NSNumber*)(void*)number;
  if (type == kCFNumberSInt64Type) {
    *static_cast<int64_t*>(value) = [n longLongValue];
  } else {
    *static_cast<int32_t*>(value) = [n intValue];
  }
  return 1;
}
void CFRelease(CFTypeRef cf) {
  [(id)(void*)cf release];
}
}  // extern "C"

// --- fake_metal.h --------------------------------------------------------------------------

extern "C" {

int fake_metal_configure(const char* json) {
  return configure(json);
}

const char* fake_metal_last_error(void) {
  return last_error().c_str();
}

const char* fake_metal_storage_name(unsigned storage_mode) {
  return mode_name(static_cast<MTLStorageMode>(storage_mode));
}

const char* fake_metal_records_json(void) {
  static std::string out;
  Guard g(lock());
  @autoreleasepool {
    NSData* data = [NSJSONSerialization dataWithJSONObject:records() options:0 error:nullptr];
    out.assign(static_cast<const char*>([data bytes]), [data length]);
  }
  return out.c_str();
}

void fake_metal_clear_records(void) {
  Guard g(lock());
  [records() removeAllObjects];
  violation_count() = 0;
}

int fake_metal_violation_count(void) {
  Guard g(lock());
  return violation_count();
}

int fake_metal_complete_command_buffers(void) {
  int count = 0;
  @autoreleasepool {
    for (;;) {
      FakeMTLCommandBuffer* next = nil;
      {
        Guard g(lock());
        if (pending().empty()) break;
        next = pending().front();
      }
      [next fakeComplete];
      ++count;
    }
  }
  return count;
}

int fake_metal_pending_command_buffers(void) {
  Guard g(lock());
  return static_cast<int>(pending().size());
}

long fake_metal_device_retain_count(uint64_t registry_id) {
  Guard g(lock());
  for (FakeMTLDevice* device in devices_list()) {
    if (device->_registryID == registry_id) return static_cast<long>([device retainCount]);
  }
  return -1;
}

long fake_metal_device_queries(uint64_t registry_id) {
  Guard g(lock());
  for (FakeMTLDevice* device in devices_list()) {
    if (device->_registryID == registry_id) return device->_queries;
  }
  return -1;
}

void* fm_copy_device(uint64_t registry_id) {
  Guard g(lock());
  configure_from_environment();
  for (FakeMTLDevice* device in devices_list()) {
    if (device->_registryID == registry_id) return [device retain];
  }
  return nullptr;
}

void* fm_create_system_default_device(void) {
  return MTLCreateSystemDefaultDevice();
}

size_t fm_all_device_ids(uint64_t* ids, size_t capacity) {
  @autoreleasepool {
    NSArray* devices = [MTLCopyAllDevices() autorelease];
    for (NSUInteger i = 0; i < [devices count] && i < capacity; ++i) {
      ids[i] = [[devices objectAtIndex:i] registryID];
    }
    return [devices count];
  }
}

void fm_release(void* object) {
  @autoreleasepool {
    [(id)object release];
  }
}

long fm_retain_count(void* object) {
  return static_cast<long>([(id)object retainCount]);
}

void* fm_new_heap(void* device, uint64_t size, unsigned storage_mode, unsigned cpu_cache_mode,
                  unsigned hazard_tracking_mode, long heap_type) {
  @autoreleasepool {
    MTLHeapDescriptor* d = [[MTLHeapDescriptor new] autorelease];
    [d setSize:size];
    [d setStorageMode:static_cast<MTLStorageMode>(storage_mode)];
    [d setCpuCacheMode:static_cast<MTLCPUCacheMode>(cpu_cache_mode)];
    [d setHazardTrackingMode:static_cast<MTLHazardTrackingMode>(hazard_tracking_mode)];
    [d setType:static_cast<MTLHeapType>(heap_type)];
    return [(id<MTLDevice>)device newHeapWithDescriptor:d];
  }
}

void* fm_new_heap_with_options(void* device, uint64_t size, uint64_t resource_options) {
  @autoreleasepool {
    MTLHeapDescriptor* d = [[MTLHeapDescriptor new] autorelease];
    [d setSize:size];
    [d setResourceOptions:resource_options];
    return [(id<MTLDevice>)device newHeapWithDescriptor:d];
  }
}

uint64_t fm_heap_size(void* heap) {
  return [(id<MTLHeap>)heap size];
}
uint64_t fm_heap_used_size(void* heap) {
  return [(id<MTLHeap>)heap usedSize];
}
uint64_t fm_heap_max_available(void* heap, uint64_t alignment) {
  return [(id<MTLHeap>)heap maxAvailableSizeWithAlignment:alignment];
}
unsigned fm_heap_storage_mode(void* heap) {
  return [(id<MTLHeap>)heap storageMode];
}
void* fm_heap_new_buffer(void* heap, uint64_t length, uint64_t options) {
  @autoreleasepool {
    return [(id<MTLHeap>)heap newBufferWithLength:length options:options];
  }
}
void* fm_heap_new_buffer_at(void* heap, uint64_t length, uint64_t options, uint64_t offset) {
  @autoreleasepool {
    return [(id<MTLHeap>)heap newBufferWithLength:length options:options offset:offset];
  }
}
void* fm_device_new_buffer(void* device, uint64_t length, uint64_t options) {
  @autoreleasepool {
    return [(id<MTLDevice>)device newBufferWithLength:length options:options];
  }
}
uint64_t fm_heap_buffer_size(void* device, uint64_t length, uint64_t options, uint64_t* align) {
  const MTLSizeAndAlign sa = [(id<MTLDevice>)device heapBufferSizeAndAlignWithLength:length options:options];
  if (align != nullptr) *align = sa.align;
  return sa.size;
}
unsigned fm_buffer_storage_mode(void* buffer) {
  return [(id<MTLBuffer>)buffer storageMode];
}
uint64_t fm_buffer_length(void* buffer) {
  return [(id<MTLBuffer>)buffer length];
}
void* fm_buffer_contents(void* buffer) {
  @autoreleasepool {
    return [(id<MTLBuffer>)buffer contents];
  }
}
void* fm_buffer_heap(void* buffer) {
  return [(id<MTLBuffer>)buffer heap];
}
void fm_buffer_did_modify(void* buffer, uint64_t location, uint64_t length) {
  @autoreleasepool {
    [(id<MTLBuffer>)buffer didModifyRange:NSMakeRange(location, length)];
  }
}
unsigned fm_set_purgeable(void* resource, unsigned state) {
  return [(id<MTLResource>)resource setPurgeableState:static_cast<MTLPurgeableState>(state)];
}
void* fm_buffer_gpu_bytes(void* buffer) {
  FakeMTLBuffer* b = as_buffer((id)buffer);
  return b != nil ? b->_gpu : nullptr;
}
void* fm_new_command_queue(void* device) {
  return [(id<MTLDevice>)device newCommandQueue];
}
void* fm_new_command_buffer(void* queue, int retained) {
  @autoreleasepool {
    id<MTLCommandQueue> q = (id<MTLCommandQueue>)queue;
    id<MTLCommandBuffer> cb = retained ? [q commandBuffer] : [q commandBufferWithUnretainedReferences];
    return [cb retain];
  }
}
void fm_blit_copy(void* command_buffer, void* source, uint64_t source_offset, void* destination,
                  uint64_t destination_offset, uint64_t size, void* sync) {
  @autoreleasepool {
    id<MTLBlitCommandEncoder> blit = [(id<MTLCommandBuffer>)command_buffer blitCommandEncoder];
    if (source != nullptr) {
      [blit copyFromBuffer:(id<MTLBuffer>)source sourceOffset:source_offset toBuffer:(id<MTLBuffer>)destination
          destinationOffset:destination_offset size:size];
    }
    if (sync != nullptr) {
      [blit synchronizeResource:(id<MTLResource>)sync];
    }
    [blit endEncoding];
  }
}

extern "C++" {
namespace {
std::string& tags() {
  static std::string t;
  return t;
}
std::recursive_mutex& gate() {
  static std::recursive_mutex g;
  return g;
}
}  // namespace
}

void fm_add_completed_tag(void* command_buffer, int tag) {
  [(id<MTLCommandBuffer>)command_buffer addCompletedHandler:^(id<MTLCommandBuffer> cb) {
    Guard g(lock());
    tags() += (tags().empty() ? "" : ",") + std::to_string(tag) + ":" + std::to_string([cb status]);
  }];
}
// fm_hold_gate/fm_add_gated_handler: a lock the test holds on its own thread and a handler
// that takes it; the handler can take it only on the test's thread, never where Metal runs it.
void fm_hold_gate(int hold) {
  if (hold) {
    gate().lock();
  } else {
    gate().unlock();
  }
}
void fm_add_gated_handler(void* command_buffer) {
  [(id<MTLCommandBuffer>)command_buffer addCompletedHandler:^(id<MTLCommandBuffer>) {
    std::lock_guard<std::recursive_mutex> g(gate());
  }];
}
const char* fm_completed_tags(void) {
  static std::string out;
  Guard g(lock());
  out = tags();
  return out.c_str();
}
void fm_commit(void* command_buffer) {
  [(id<MTLCommandBuffer>)command_buffer commit];
}
void fm_wait(void* command_buffer) {
  @autoreleasepool {
    [(id<MTLCommandBuffer>)command_buffer waitUntilCompleted];
  }
}
unsigned fm_command_buffer_status(void* command_buffer) {
  return [(id<MTLCommandBuffer>)command_buffer status];
}

}  // extern "C"
