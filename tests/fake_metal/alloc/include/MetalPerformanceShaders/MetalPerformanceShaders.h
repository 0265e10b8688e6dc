// Stand-in for Apple's MetalPerformanceShaders in the allocator's stand-in builds
// (tests/fake_metal/alloc): declarations only, enough for upstream's MPSStream.h and
// MPSEvent.h to compile around MPSAllocator.h. Nothing here is ever called.
#pragma once
#include <Metal/Metal.h>

#include <condition_variable> // upstream's MPSEvent.h uses it; macOS's libc++ brings it in

// What macOS's SDK declares beside Metal and Foundation that the MPS headers name.
typedef struct dispatch_queue_s* dispatch_queue_t;
// libdispatch's; upstream's MPSAllocator.mm calls it (release_cached_buffers, the scalar
// pool's free). Defined by the whole-allocator build's stand-in stream (whole_stand_ins.mm).
typedef void (^dispatch_block_t)(void);
extern "C" void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block);
#define CLOCK_UPTIME_RAW 8
extern "C" uint64_t clock_gettime_nsec_np(int clock_id);

@protocol MTLComputeCommandEncoder;
@protocol MTLSharedEvent;
@class MTLSharedEventListener;
typedef void (^MTLSharedEventNotificationBlock)(id<MTLSharedEvent>, uint64_t value);

@interface MPSCommandBuffer : NSObject
@end
