// Linux-only declarations of exactly the Metal API subset lib/metal/*.mm uses, so the glue can
// be syntax-checked with clang and GNUstep (`make test-metal`). Written from Apple's
// documentation (developer.apple.com/documentation/metal), not copied from the SDK: selectors,
// parameter types, nullability and ownership follow the documented declarations; each line
// notes the first macOS version that has it. macOS builds include <Metal/Metal.h> instead.
// An error here cannot be seen on Linux, so keep this file small and exact.
#pragma once

#import <Foundation/Foundation.h>

#pragma clang assume_nonnull begin

@protocol MTLDevice;
@protocol MTLCommandQueue;
@protocol MTLCommandBuffer;
@protocol MTLBuffer;
@protocol MTLLibrary;
@protocol MTLFunction;
@protocol MTLComputePipelineState;

// macOS 10.11
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;

// macOS 10.11
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

// macOS 10.11: MTLResourceOptions; storage mode bits are MTLStorageMode << 4.
typedef NSUInteger MTLResourceOptions;
enum {
  MTLResourceStorageModeShared = 0UL << 4,   // macOS 10.11
  MTLResourceStorageModePrivate = 2UL << 4,  // macOS 10.11
};

// macOS 10.11
typedef NSUInteger MTLCommandBufferStatus;
enum {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5,
};

// macOS 15.0
typedef NSInteger MTLMathMode;
enum {
  MTLMathModeSafe = 0,
  MTLMathModeRelaxed = 1,
  MTLMathModeFast = 2,
};

// macOS 10.15; the Apple7 family (M1 and later) since macOS 11.0.
typedef NSInteger MTLGPUFamily;
enum {
  MTLGPUFamilyApple7 = 1007,
};

// macOS 10.11
@interface MTLCompileOptions : NSObject <NSCopying>
// macOS 10.11; keys NSString, values NSString or NSNumber.
- (nullable NSDictionary<NSString*, NSObject*>*)preprocessorMacros;
- (void)setPreprocessorMacros:(nullable NSDictionary<NSString*, NSObject*>*)macros;
// macOS 10.11, deprecated in macOS 15.0 for mathMode.
- (BOOL)fastMathEnabled;
- (void)setFastMathEnabled:(BOOL)enabled;
// macOS 15.0
- (MTLMathMode)mathMode __attribute__((availability(macos, introduced = 15.0)));
- (void)setMathMode:(MTLMathMode)mode __attribute__((availability(macos, introduced = 15.0)));
@end

// macOS 10.11
typedef NSUInteger MTLStorageMode;
enum {
  MTLStorageModeShared = 0,   // macOS 10.11
  MTLStorageModePrivate = 2,  // macOS 10.11
};

// macOS 10.11; properties, declared here as their getters.
@protocol MTLResource <NSObject>
- (id<MTLDevice>)device;             // macOS 10.11
- (MTLStorageMode)storageMode;       // macOS 10.11
@end

// macOS 10.11
@protocol MTLBuffer <MTLResource>
- (void*)contents __attribute__((objc_returns_inner_pointer));  // macOS 10.11
- (NSUInteger)length;                         // macOS 10.11
@end

// macOS 10.11
@protocol MTLFunction <NSObject>
@end

// macOS 10.11
@protocol MTLLibrary <NSObject>
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)functionName;  // macOS 10.11
@end

// macOS 10.11
@protocol MTLComputePipelineState <NSObject>
- (NSUInteger)maxTotalThreadsPerThreadgroup;  // macOS 10.11
@end

// macOS 10.11
@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;  // macOS 10.11
@end

// macOS 10.11
@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;                            // macOS 10.11
- (void)setBuffer:(nullable id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;  // macOS 10.11
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;      // macOS 10.11
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;               // macOS 10.11
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid
       threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;                                   // macOS 10.11
@end

// macOS 10.11
@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;  // macOS 10.11
@end

// macOS 10.11
@protocol MTLCommandBuffer <NSObject>
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoder;  // macOS 10.11
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;        // macOS 10.11
- (void)commit;                                                  // macOS 10.11
- (void)waitUntilCompleted;                                      // macOS 10.11
- (MTLCommandBufferStatus)status;                                // macOS 10.11
- (nullable NSError*)error;                                       // macOS 10.11
@end

// macOS 10.11
@protocol MTLCommandQueue <NSObject>
- (nullable id<MTLCommandBuffer>)commandBuffer;  // macOS 10.11, autoreleased
@end

// macOS 10.11
@protocol MTLDevice <NSObject>
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;  // macOS 10.15
- (nullable id<MTLCommandQueue>)newCommandQueue;  // macOS 10.11
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;  // macOS 10.11
- (nullable id<MTLBuffer>)newBufferWithBytes:(const void*)pointer
                                      length:(NSUInteger)length
                                     options:(MTLResourceOptions)options;  // macOS 10.11
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(NSError* _Nullable* _Nullable)error;  // macOS 10.11
- (nullable id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                                                      error:(NSError* _Nullable* _Nullable)error;  // macOS 10.11
@end

// macOS 10.11; the caller owns the returned array.
NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) NS_RETURNS_RETAINED;

#pragma clang assume_nonnull end
