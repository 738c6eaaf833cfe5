/**
 * `RateLimiterStore`'s functions (effect/persistence/RateLimiter's store on PostgreSQL): a fixed
 * window, a token bucket and an adaptive (429-driven) state per key, each one call that locks
 * its key's row for its statement, so callers on any number of processes take turns per key.
 * Times are milliseconds since the epoch: the caller's (`p_now`) or the database's clock.
 * They answer as effect 4.1.5's memory and Redis stores do (the property test holds them to it).
 */
import type { Tables } from "../flow/limits.js"

export const rateLimiterFunctions = (t: Tables): ReadonlyArray<string> => [
  `CREATE OR REPLACE FUNCTION ${t("rate_fixed_window")}(
        p_key text, p_tokens double precision, p_refill double precision, p_limit double precision,
        p_now double precision)
  RETURNS TABLE (count double precision, ttl double precision)
  LANGUAGE plpgsql
AS $window$
#variable_conflict use_column
DECLARE
  t_now double precision := coalesce(p_now, extract(epoch FROM clock_timestamp())::float8 * 1000);
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
  t_now double precision := coalesce(p_now, extract(epoch FROM clock_timestamp())::float8 * 1000);
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
$bucket$`,
  `CREATE OR REPLACE FUNCTION ${t("rate_adaptive_consume")}(
        p_key text, p_tokens double precision, p_fallback_window double precision, p_grace double precision,
        p_now double precision)
  RETURNS TABLE (delay double precision, epoch integer, phase text)
  LANGUAGE plpgsql
AS $consume$
#variable_conflict use_column
DECLARE
  t_now double precision := coalesce(p_now, extract(epoch FROM clock_timestamp())::float8 * 1000);
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
  `CREATE OR REPLACE FUNCTION ${t("rate_adaptive_feedback")}(
        p_key text, p_epoch integer, p_tokens double precision, p_retry_after double precision,
        p_grace double precision, p_max_window double precision, p_now double precision)
  RETURNS void
  LANGUAGE plpgsql
AS $feedback$
#variable_conflict use_column
DECLARE
  t_now double precision := coalesce(p_now, extract(epoch FROM clock_timestamp())::float8 * 1000);
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
