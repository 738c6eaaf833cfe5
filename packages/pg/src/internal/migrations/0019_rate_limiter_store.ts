/**
 * Version 19, released: never edit it (a test holds its text); add the next version instead.
 *
 * The state of `RateLimiterStore` (`effect/persistence/RateLimiter`'s store, kept here so
 * every process shares one limit): a fixed-window counter, a token bucket and an adaptive
 * (429-driven) state per key, each a row. Every operation is one function call — one round
 * trip — that locks its key's row for the length of its statement, so concurrent callers on
 * any number of processes take turns per key and never both spend the last token.
 *
 * Times are milliseconds since the epoch, given by the caller (the application's clock) or,
 * when NULL, the database's (`clock_timestamp()`: one clock for every process). A row past
 * its `expires_at` is as good as absent (a window over, a bucket full again at the limit it
 * was last asked with, an adaptive state forgotten); the store's pruner deletes such rows.
 * `expires_at` is in no index, so each call's update stays HOT.
 */
import type { Migration } from "../../Migrations.js"

/** Milliseconds since the epoch: `given` (the application's clock), or the database's when NULL. */
export const millisNow = (given: string) => `coalesce(${given}, extract(epoch FROM clock_timestamp())::float8 * 1000)`

const now = millisNow("p_now")

export const migration: Migration = {
  version: 19,
  name: "rate limiter store",
  statements: (t) => [
    `CREATE TABLE ${t("rate_windows")} (
        key text PRIMARY KEY,
        count double precision NOT NULL,
        expires_at double precision NOT NULL
      )`,
    `CREATE TABLE ${t("rate_buckets")} (
        key text PRIMARY KEY,
        tokens double precision NOT NULL,
        refilled_at double precision NOT NULL,
        expires_at double precision NOT NULL
      )`,
    `CREATE TABLE ${t("rate_adaptive")} (
        key text PRIMARY KEY,
        phase text NOT NULL CHECK (phase IN ('cooldown', 'learning', 'learned')),
        epoch integer NOT NULL,
        cooldown_until double precision NOT NULL,
        learning_started_at double precision NOT NULL,
        observed_tokens double precision NOT NULL,
        learned_limit double precision NOT NULL,
        learned_window double precision NOT NULL,
        expires_at double precision NOT NULL
      )`,
    // A fixed window: the count after taking p_tokens, and the time left in the window. With
    // p_limit, a take past it is not recorded (the count returned is over the limit).
    `CREATE FUNCTION ${t("rate_fixed_window")}(
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
  -- The key's row, locked; one whose window has passed starts over.
  INSERT INTO ${t("rate_windows")} AS w (key, count, expires_at) VALUES (p_key, 0, t_now)
  ON CONFLICT (key) DO UPDATE
     SET count = CASE WHEN w.expires_at <= t_now THEN 0 ELSE w.count END,
         expires_at = CASE WHEN w.expires_at <= t_now THEN t_now ELSE w.expires_at END
  RETURNING w.count, w.expires_at INTO c, e;
  IF p_limit IS NOT NULL AND c + p_tokens > p_limit THEN
    RETURN QUERY SELECT c + p_tokens, e - t_now;
    RETURN;
  END IF;
  UPDATE ${t("rate_windows")} w SET count = c + p_tokens, expires_at = e + p_refill * p_tokens WHERE w.key = p_key;
  RETURN QUERY SELECT c + p_tokens, e + p_refill * p_tokens - t_now;
END
$window$`,
    // A token bucket: refilled by whole intervals since its last refill, then p_tokens taken
    // (kept below zero only with p_overflow). Returns what is left after the take and the time
    // into the current interval. It expires when it would be full again.
    `CREATE FUNCTION ${t("rate_token_bucket")}(
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
  into_interval double precision;
BEGIN
  -- The key's row, locked (a new bucket is full). Its own state decides, expired or not: a
  -- bucket asked with a larger limit than it was filled to is not full yet.
  INSERT INTO ${t("rate_buckets")} AS b (key, tokens, refilled_at, expires_at) VALUES (p_key, p_limit, t_now, t_now)
  ON CONFLICT (key) DO UPDATE SET key = excluded.key
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
  into_interval := greatest(0, t_now - since);
  UPDATE ${t("rate_buckets")} b
     SET tokens = held, refilled_at = since,
         expires_at = t_now + greatest(1, ceil(ceil(p_limit - held) * p_refill - into_interval))
   WHERE b.key = p_key;
  RETURN QUERY SELECT left_over, into_interval;
END
$bucket$`,
    // Adaptive, a consume: the delay before the request, the state's epoch and phase.
    `CREATE FUNCTION ${t("rate_adaptive_consume")}(
        p_key text, p_tokens double precision, p_fallback_window double precision, p_grace double precision,
        p_now double precision)
  RETURNS TABLE (delay double precision, epoch integer, phase text)
  LANGUAGE plpgsql
AS $consume$
#variable_conflict use_column
DECLARE
  t_now double precision := ${now};
  s ${t("rate_adaptive")}%ROWTYPE;
  per_token double precision;
  observed double precision;
  cool_until double precision;
  into_window double precision;
  windows double precision;
BEGIN
  SELECT * INTO s FROM ${t("rate_adaptive")} a WHERE a.key = p_key FOR UPDATE;
  IF NOT FOUND OR s.expires_at <= t_now THEN
    RETURN QUERY SELECT 0::float8, 0, 'inactive';
    RETURN;
  END IF;
  IF s.phase = 'cooldown' THEN
    IF s.cooldown_until > t_now THEN
      RETURN QUERY SELECT s.cooldown_until - t_now, s.epoch, 'cooldown';
      RETURN;
    END IF;
    -- The cooldown is over: the first request after it starts learning how much passes.
    UPDATE ${t("rate_adaptive")} a
       SET phase = 'learning', epoch = a.epoch + 1, learning_started_at = t_now, observed_tokens = p_tokens,
           expires_at = t_now + p_fallback_window + p_grace
     WHERE a.key = p_key;
    RETURN QUERY SELECT 0::float8, s.epoch + 1, 'learning';
    RETURN;
  END IF;
  IF s.phase = 'learning' THEN
    UPDATE ${t("rate_adaptive")} a SET observed_tokens = a.observed_tokens + p_tokens WHERE a.key = p_key;
    RETURN QUERY SELECT 0::float8, s.epoch, 'learning';
    RETURN;
  END IF;
  -- Learned: the requests are spaced at the learned rate, window by window.
  per_token := s.learned_window / s.learned_limit;
  observed := s.observed_tokens;
  cool_until := s.cooldown_until;
  IF cool_until <= t_now THEN
    observed := 0;
    cool_until := t_now;
  END IF;
  observed := observed + p_tokens;
  cool_until := cool_until + per_token * p_tokens;
  UPDATE ${t("rate_adaptive")} a SET observed_tokens = observed, cooldown_until = cool_until WHERE a.key = p_key;
  into_window := observed * per_token - (cool_until - t_now);
  windows := floor((observed - 1) / s.learned_limit);
  RETURN QUERY SELECT greatest(windows * s.learned_window - into_window, 0), s.epoch, 'learned';
END
$consume$`,
    // Adaptive, a 429 with its Retry-After (p_retry_after, already clamped): starts or extends
    // a cooldown, or ends a learning phase with what it learned. Feedback of another epoch is
    // stale and ignored.
    `CREATE FUNCTION ${t("rate_adaptive_feedback")}(
        p_key text, p_epoch integer, p_tokens double precision, p_retry_after double precision,
        p_grace double precision, p_max_window double precision, p_now double precision)
  RETURNS void
  LANGUAGE plpgsql
AS $feedback$
#variable_conflict use_column
DECLARE
  t_now double precision := ${now};
  cool_until double precision := t_now + p_retry_after;
  s ${t("rate_adaptive")}%ROWTYPE;
  accepted double precision;
  window_learned double precision;
BEGIN
  SELECT * INTO s FROM ${t("rate_adaptive")} a WHERE a.key = p_key FOR UPDATE;
  IF NOT FOUND OR s.expires_at <= t_now THEN
    IF p_epoch <> 0 THEN
      RETURN;
    END IF;
    -- No state: a cooldown starts (over an expired row; not over one another caller just made).
    INSERT INTO ${t("rate_adaptive")} AS a
           (key, phase, epoch, cooldown_until, learning_started_at, observed_tokens, learned_limit, learned_window,
            expires_at)
    VALUES (p_key, 'cooldown', 0, cool_until, 0, 0, 0, 0, cool_until + p_grace)
    ON CONFLICT (key) DO UPDATE
       SET phase = 'cooldown', epoch = 0, cooldown_until = cool_until, learning_started_at = 0, observed_tokens = 0,
           learned_limit = 0, learned_window = 0, expires_at = cool_until + p_grace
     WHERE a.expires_at <= t_now;
    IF FOUND THEN
      RETURN;
    END IF;
    SELECT * INTO s FROM ${t("rate_adaptive")} a WHERE a.key = p_key FOR UPDATE;
  END IF;
  IF s.epoch <> p_epoch THEN
    RETURN;
  END IF;
  IF s.phase = 'cooldown' THEN
    UPDATE ${t("rate_adaptive")} a
       SET cooldown_until = greatest(a.cooldown_until, cool_until), expires_at = greatest(a.cooldown_until, cool_until) + p_grace
     WHERE a.key = p_key;
    RETURN;
  END IF;
  accepted := s.observed_tokens - p_tokens;
  IF s.phase = 'learning' AND accepted > 0 THEN
    -- What passed before this refusal is the limit; the time it took, plus the wait asked, the window.
    window_learned := (t_now - s.learning_started_at) + p_retry_after;
    window_learned := CASE WHEN window_learned <= 0 THEN 1 ELSE least(window_learned, p_max_window) END;
    UPDATE ${t("rate_adaptive")} a
       SET phase = 'learned', epoch = a.epoch + 1, cooldown_until = s.learning_started_at + window_learned,
           observed_tokens = accepted, learned_limit = accepted, learned_window = window_learned,
           expires_at = t_now + window_learned + p_grace
     WHERE a.key = p_key;
    RETURN;
  END IF;
  -- Learning that let nothing through, or a refusal while learned: a cooldown again (same epoch).
  UPDATE ${t("rate_adaptive")} a
     SET phase = 'cooldown', cooldown_until = cool_until, learning_started_at = 0, observed_tokens = 0,
         learned_limit = 0, learned_window = 0, expires_at = cool_until + p_grace
   WHERE a.key = p_key;
END
$feedback$`
  ]
}
