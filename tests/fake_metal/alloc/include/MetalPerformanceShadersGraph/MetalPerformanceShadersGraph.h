// Stand-in for Apple's MPSGraph in the allocator's stand-in builds: declarations only.
#pragma once
#include <MetalPerformanceShaders/MetalPerformanceShaders.h>

@interface MPSGraph : NSObject
@end
@interface MPSGraphExecutionDescriptor : NSObject
@end
@interface MPSGraphCompilationDescriptor : NSObject
@end
