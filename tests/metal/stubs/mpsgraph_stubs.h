// Linux-only declarations of exactly the MetalPerformanceShaders(Graph) API subset
// lib/metal/mpsgraph_backend.mm uses, written from Apple's documentation
// (developer.apple.com/documentation/metalperformanceshadersgraph); each line notes the first
// macOS version that has it. macOS builds include the real framework headers instead.
#pragma once

#import <Foundation/Foundation.h>

#import "metal_stubs.h"

#pragma clang assume_nonnull begin

// MetalPerformanceShaders, macOS 10.13: a type code with its width in the low bits.
typedef uint32_t MPSDataType;
enum {
  MPSDataTypeFloat32 = 0x10000000 | 32,                // macOS 10.13
  MPSDataTypeFloat16 = 0x10000000 | 16,                // macOS 10.13
  MPSDataTypeInt32 = 0x20000000 | 32,                  // macOS 10.13
  MPSDataTypeInt64 = 0x20000000 | 64,                  // macOS 10.13
  MPSDataTypeBFloat16 = 0x80000000 | 0x10000000 | 16,  // macOS 14.0 (alternate encoding of float16)
};

// MetalPerformanceShaders, macOS 10.15 (MPSCommandBuffer conforms to MTLCommandBuffer).
@interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
+ (instancetype)commandBufferFromCommandQueue:(id<MTLCommandQueue>)commandQueue;  // macOS 10.15, autoreleased
@end

// macOS 11.0
@interface MPSGraphTensor : NSObject <NSCopying>
@end

// macOS 11.0
@interface MPSGraphOperation : NSObject <NSCopying>
@end

// macOS 11.0
@interface MPSGraphExecutionDescriptor : NSObject
@end

// macOS 11.0
@interface MPSGraphTensorData : NSObject
- (instancetype)initWithMTLBuffer:(id<MTLBuffer>)buffer
                            shape:(NSArray<NSNumber*>*)shape
                         dataType:(MPSDataType)dataType;  // macOS 11.0
@end

// macOS 11.0
@interface MPSGraph : NSObject
- (instancetype)init;  // macOS 11.0
- (MPSGraphTensor*)placeholderWithShape:(nullable NSArray<NSNumber*>*)shape
                               dataType:(MPSDataType)dataType
                                   name:(nullable NSString*)name;  // macOS 11.0
// Last axis only; values then int32 indices.
- (NSArray<MPSGraphTensor*>*)topKWithSourceTensor:(MPSGraphTensor*)source
                                                k:(NSUInteger)k
                                             name:(nullable NSString*)name;  // macOS 11.0
- (NSArray<MPSGraphTensor*>*)topKWithSourceTensor:(MPSGraphTensor*)source
                                             axis:(NSInteger)axis
                                                k:(NSUInteger)k
                                             name:(nullable NSString*)name
    __attribute__((availability(macos, introduced = 14.0)));
- (NSArray<MPSGraphTensor*>*)bottomKWithSourceTensor:(MPSGraphTensor*)source
                                                axis:(NSInteger)axis
                                                   k:(NSUInteger)k
                                                name:(nullable NSString*)name
    __attribute__((availability(macos, introduced = 14.0)));
- (MPSGraphTensor*)transposeTensor:(MPSGraphTensor*)tensor
                         dimension:(NSUInteger)dimensionIndex
                     withDimension:(NSUInteger)dimensionIndex2
                              name:(nullable NSString*)name;  // macOS 11.0
- (MPSGraphTensor*)negativeWithTensor:(MPSGraphTensor*)tensor name:(nullable NSString*)name;  // macOS 11.0
- (MPSGraphTensor*)castTensor:(MPSGraphTensor*)tensor toType:(MPSDataType)type name:(NSString*)name;  // macOS 11.0
- (void)encodeToCommandBuffer:(MPSCommandBuffer*)commandBuffer
                        feeds:(NSDictionary<MPSGraphTensor*, MPSGraphTensorData*>*)feeds
             targetOperations:(nullable NSArray<MPSGraphOperation*>*)targetOperations
            resultsDictionary:(NSDictionary<MPSGraphTensor*, MPSGraphTensorData*>*)resultsDictionary
          executionDescriptor:(nullable MPSGraphExecutionDescriptor*)executionDescriptor;  // macOS 11.0
@end

#pragma clang assume_nonnull end
