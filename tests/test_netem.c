/* The link model: serialisation, latency, FIFO order under jitter,
 * determinism by seed, and bad parameters. */
#include <criterion/criterion.h>
#include <math.h>

#include "baton/netem.h"

Test(netem, idle_link_time_is_latency_plus_serialisation) {
  bt_link l;
  bt_err err;
  cr_assert_eq(bt_link_init(&l, (bt_link_params){8e6, 0.002, 0}, 1, 0, 1, &err), 0, "%s",
               err.msg);
  double left;
  double arrival = bt_link_send(&l, 1.0, 1000000, &left); /* 8 Mbit over 8 Mbit/s */
  cr_expect_float_eq(left, 2.0, 1e-12);
  cr_expect_float_eq(arrival, 2.002, 1e-12);
  cr_expect_float_eq(bt_link_ideal_time(&l.p, 1000000), 1.002, 1e-12);
}

Test(netem, back_to_back_messages_queue) {
  bt_link l;
  cr_assert_eq(bt_link_init(&l, (bt_link_params){8e6, 0.001, 0}, 1, 0, 1, NULL), 0);
  double a1 = bt_link_send(&l, 0.0, 500000, NULL); /* 0.5 s on the wire */
  double a2 = bt_link_send(&l, 0.1, 500000, NULL); /* waits for the first */
  cr_expect_float_eq(a1, 0.501, 1e-12);
  cr_expect_float_eq(a2, 1.001, 1e-12);
  double a3 = bt_link_send(&l, 5.0, 0, NULL); /* idle again: latency only */
  cr_expect_float_eq(a3, 5.001, 1e-12);
}

Test(netem, jitter_is_seeded_non_negative_and_fifo) {
  bt_link a, b;
  bt_link_params p = {1e9, 0.001, 0.002};
  cr_assert_eq(bt_link_init(&a, p, 7, 2, 3, NULL), 0);
  cr_assert_eq(bt_link_init(&b, p, 7, 2, 3, NULL), 0);
  double prev = 0, spread = 0;
  for (int i = 0; i < 1000; i++) {
    double t = i * 1e-4;
    double x = bt_link_send(&a, t, 100, NULL), y = bt_link_send(&b, t, 100, NULL);
    cr_assert_eq(x, y, "same seed, same arrivals");
    cr_assert_geq(x, t + 100 * 8 / 1e9, "never earlier than the wire allows");
    cr_assert_geq(x, prev, "FIFO");
    spread = fmax(spread, x - t);
    prev = x;
  }
  cr_expect_gt(spread, 0.003, "jitter visible");
}

Test(netem, bad_parameters_are_errors) {
  bt_link l;
  bt_err err;
  cr_expect_lt(bt_link_init(&l, (bt_link_params){0, 0, 0}, 1, 0, 1, &err), 0);
  cr_expect(strstr(err.msg, "bandwidth") != NULL, "%s", err.msg);
  cr_expect_lt(bt_link_init(&l, (bt_link_params){1e6, -1, 0}, 1, 0, 1, &err), 0);
  cr_expect_lt(bt_link_init(&l, (bt_link_params){1e6, 0, NAN}, 1, 0, 1, &err), 0);
}
