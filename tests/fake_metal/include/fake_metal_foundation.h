// Foundation API that macOS has and GNUstep base 1.28 lacks, which upstream's MPSDevice.mm
// calls: NSProcessInfo's isOperatingSystemAtLeastVersion: (macOS 10.10+). The stand-in
// answers from the macOS version a test configures (fake_metal.h), so each line's
// "macOS X or newer" checks run as on that macOS.
#pragma once

#import <Foundation/Foundation.h>

#if !defined(__APPLE__)
typedef struct {
  NSInteger majorVersion;
  NSInteger minorVersion;
  NSInteger patchVersion;
} NSOperatingSystemVersion;

@interface NSProcessInfo (FakeMetalMacOSVersion)
- (BOOL)isOperatingSystemAtLeastVersion:(NSOperatingSystemVersion)version;
- (NSOperatingSystemVersion)operatingSystemVersion;
@end
#endif
