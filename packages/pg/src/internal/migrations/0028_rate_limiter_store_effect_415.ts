/**
 * Version 28, released: never edit it (a test holds its text); add the next version instead.
 *
 * `RateLimiterStore`'s fixed window follows effect 4.1.5's contract for a window with a limit
 * (its memory and Redis stores): the window opens on its first admission of a positive number
 * of tokens and lasts the whole window, `refill * limit`, however many tokens later takes add
 * (before, each take stretched it by `refill * tokens`, as a window without a limit still
 * does). A limit is a limit at any value: 0 admits nothing (the store used to read 0 as "no
 * limit", as effect's memory store did before 4.1.5). A take past the limit is not recorded.
 *
 * The token bucket follows the same release: a bucket whose expiry has passed (full again at
 * the limit it was last asked with) is a fresh bucket at the limit asked now (it used to be
 * refilled from its own state, so a larger limit found it short), and it expires once it would
 * be full, counted from its last refill (effect's `lastRefill + ceil(limit - tokens) * refill`).
 */
import type { Migration } from "../../Migrations.js"

const now = "coalesce(p_now, extract(epoch FROM clock_timestamp())::float8 * 1000)"

export const migration: Migration = {
  version: 28,
  name: "rate limiter store as effect 4.1.5's",
  statements: (t) => [
    `CREATE OR REPLACE FUNCTION ${t("rate_fixed_window")}(
        p_key text, p_tokens double precision, p_refill double precision, p_limit double precision,
        p_now double precision)
  RETURNS TABLE (count double precision, ttl double precision)
  LANGUAGE plpgsql
AS $window$
#variable_conflict use_column
DECLARE
  t_now double precision := ${now};
  c double precision;
  e double precision;
BEGIN
  -- The key's row, locked; one whose window has passed starts over (it expires now: not open yet).
  INSERT INTO ${t("rate_windows")} AS w (key, count, expires_at) VALUES (p_key, 0, t_now)
  ON CONFLICT (key) DO UPDATE
     SET count = CASE WHEN w.expires_at <= t_now THEN 0 ELSE w.count END,
         expires_at = CASE WHEN w.expires_at <= t_now THEN t_now ELSE w.expires_at END
  RETURNING w.count, w.expires_at INTO c, e;
  IF p_limit IS NOT NULL AND c + p_tokens > p_limit THEN
    RETURN QUERY SELECT c + p_tokens, e - t_now;
    RETURN;
  END IF;
  IF p_limit IS NULL THEN
    e := e + p_refill * p_tokens;
  ELSIF e = t_now AND p_tokens > 0 THEN
    -- A capped window opens on its first positive admission and lasts the full window.
    e := t_now + p_refill * p_limit;
  END IF;
  UPDATE ${t("rate_windows")} w SET count = c + p_tokens, expires_at = e WHERE w.key = p_key;
  RETURN QUERY SELECT c + p_tokens, e - t_now;
END
$window$`,
    `CREATE OR REPLACE FUNCTION ${t("rate_token_bucket")}(
        p_key text, p_tokens double precision, p_limit double precision, p_refill double precision,
        p_overflow boolean, p_now double precision)
  RETURNS TABLE (remaining double precision, elapsed double precision)
  LANGUAGE plpgsql
AS $bucket$
#variable_conflict use_column
DECLARE
  t_now double precision := ${now};
  held double precision;
  since double precision;
  intervals double precision;
  left_over double precision;
BEGIN
  -- The key's row, locked; a new bucket, or one whose expiry has passed, is full at this limit.
  INSERT INTO ${t("rate_buckets")} AS b (key, tokens, refilled_at, expires_at) VALUES (p_key, p_limit, t_now, t_now)
  ON CONFLICT (key) DO UPDATE
     SET tokens = CASE WHEN b.expires_at <= t_now THEN p_limit ELSE b.tokens END,
         refilled_at = CASE WHEN b.expires_at <= t_now THEN t_now ELSE b.refilled_at END
  RETURNING b.tokens, b.refilled_at INTO held, since;
  intervals := floor((t_now - since) / p_refill);
  IF intervals > 0 THEN
    held := least(p_limit, held + intervals);
    since := since + intervals * p_refill;
  END IF;
  IF held >= p_limit THEN
    since := t_now;
  END IF;
  left_over := held - p_tokens;
  IF p_overflow OR left_over >= 0 THEN
    held := left_over;
  END IF;
  UPDATE ${t("rate_buckets")} b
     SET tokens = held, refilled_at = since, expires_at = since + ceil(p_limit - held) * p_refill
   WHERE b.key = p_key;
  RETURN QUERY SELECT left_over, greatest(0, t_now - since);
END
$bucket$`
  ]
}
