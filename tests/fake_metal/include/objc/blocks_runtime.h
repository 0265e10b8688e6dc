// GNUstep's headers include <objc/blocks_runtime.h> (libobjc2's) when the compiler has
// blocks. Debian's GCC Objective-C runtime has no such header; the blocks runtime here is
// LLVM's libBlocksRuntime (package libblocksruntime-dev), whose header is <Block.h>.
#pragma once
#include <Block.h>
