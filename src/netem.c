/* netem: FIFO link model with bandwidth, latency and seeded jitter; see
 * include/baton/netem.h. */
#include "baton/netem.h"

#include <math.h>

int bt_link_init(bt_link *link, bt_link_params p, uint64_t seed, int src, int dst, bt_err *err) {
  if (!(p.bandwidth_bps > 0) || !isfinite(p.bandwidth_bps))
    return bt_err_set(err, "link %d->%d: bandwidth %g bit/s must be positive", src, dst,
                      p.bandwidth_bps);
  if (!(p.latency_s >= 0) || !isfinite(p.latency_s) || !(p.jitter_s >= 0) ||
      !isfinite(p.jitter_s))
    return bt_err_set(err, "link %d->%d: latency %g s and jitter %g s must be >= 0", src, dst,
                      p.latency_s, p.jitter_s);
  link->p = p;
  link->busy_until = 0;
  link->last_arrival = 0;
  bt_rng_seed(&link->rng, seed, bt_rng_stream(0x11e7, (uint64_t)src, (uint64_t)dst));
  return 0;
}

double bt_link_ideal_time(const bt_link_params *p, size_t bytes) {
  return p->latency_s + 8.0 * (double)bytes / p->bandwidth_bps;
}

double bt_link_send(bt_link *link, double depart, size_t bytes, double *last_byte_left) {
  const double start = depart > link->busy_until ? depart : link->busy_until;
  const double left = start + 8.0 * (double)bytes / link->p.bandwidth_bps;
  double latency = link->p.latency_s;
  if (link->p.jitter_s > 0) {
    double extra = link->p.jitter_s * bt_rng_normal(&link->rng);
    latency = latency + extra > 0 ? latency + extra : 0; /* a message never arrives early */
  }
  double arrival = left + latency;
  if (arrival < link->last_arrival) /* FIFO: no overtaking */
    arrival = link->last_arrival;
  link->busy_until = left;
  link->last_arrival = arrival;
  if (last_byte_left)
    *last_byte_left = left;
  return arrival;
}
