/* TensorBoard event files without TensorFlow or protobuf: the two pieces
 * a scalar needs, written by hand.
 *
 * A file is a sequence of TFRecords:
 *   uint64 length (little endian) | uint32 masked_crc32c(length bytes) |
 *   data[length] | uint32 masked_crc32c(data)
 * masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, CRC-32C
 * (Castagnoli, reflected polynomial 0x82f63b78).
 * Each record's data is a serialized tensorflow.Event:
 *   1 wall_time double (fixed64) | 2 step int64 (varint) |
 *   3 file_version string ("brain.Event:2", the first record) |
 *   5 summary Summary { 1 repeated Value { 1 tag string, 2 simple_value float } }
 * which is what torch.utils.tensorboard's add_scalar writes. */
#ifndef DS_MONITOR_TB_EVENTS_H
#define DS_MONITOR_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of buf, continuing from crc (0 to start). */
uint32_t ds_crc32c(uint32_t crc, const void *buf, size_t n);
/* TFRecord's masked form of a CRC. */
uint32_t ds_crc32c_mask(uint32_t crc);

/* Serialize an Event into out[0..cap); returns its length, or 0 when cap is
 * too small. tag NULL: the file_version event. */
size_t ds_tb_event_encode(uint8_t *out, size_t cap, double wall_time, int64_t step,
                          const char *tag, float value);

/* Frame data[0..n) as one TFRecord into out (n + 16 bytes); returns n + 16. */
size_t ds_tb_record_frame(uint8_t *out, const uint8_t *data, size_t n);

#endif /* DS_MONITOR_TB_EVENTS_H */
