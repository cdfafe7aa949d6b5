/* The bytes the examples record and check: byte i of a recording. */
#ifndef DVRFS_EXAMPLE_PATTERN_H
#define DVRFS_EXAMPLE_PATTERN_H
#include <stdint.h>
static inline uint8_t pattern_byte(uint64_t i) {
    return (uint8_t)(i * 31u + (i >> 12));
}
#endif
