/* netem: the link model of emulated networks (pure; no MPI).
 *
 * A link carries messages one after another (FIFO): a message that departs
 * at time t starts when the link is free, occupies it for bytes*8/bandwidth,
 * and arrives latency (+ seeded jitter) after its last byte left. The
 * runtime keeps one bt_link per directed pair of ranks on the sender and
 * stamps each message with its arrival time. */
#ifndef BATON_NETEM_H
#define BATON_NETEM_H

#include <stddef.h>
#include <stdint.h>

#include "baton/err.h"
#include "baton/rng.h"

typedef struct bt_link_params {
  double bandwidth_bps; /* bits per second, > 0 */
  double latency_s;     /* >= 0 */
  double jitter_s;      /* standard deviation of extra latency, >= 0 */
} bt_link_params;

typedef struct bt_link {
  bt_link_params p;
  double busy_until;   /* the last byte of the previous message left */
  double last_arrival; /* keeps arrivals in order despite jitter */
  bt_rng rng;
} bt_link;

/* Validates p; seeds the jitter stream from (seed, src, dst). */
int bt_link_init(bt_link *link, bt_link_params p, uint64_t seed, int src, int dst, bt_err *err);

/* Sends `bytes` departing at `depart`; returns the arrival time and sets
 * *last_byte_left (NULL allowed) to when the link becomes free. */
double bt_link_send(bt_link *link, double depart, size_t bytes, double *last_byte_left);

/* Transfer time of `bytes` on an idle link without jitter. */
double bt_link_ideal_time(const bt_link_params *p, size_t bytes);

#endif
