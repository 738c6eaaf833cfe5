/**
 * The tokens a bucket holds at `at` (NULL: no rate): what it held at `tokens_at`, plus the
 * refill since, at most its burst; a bucket never written is full. One function, so a topic's,
 * a group's and a consumer's bucket (and `FlowControl`'s listing) read one formula.
 */
import type { Tables } from "./limits.js"

export const tokensFunction = (t: Tables): string =>
  `CREATE OR REPLACE FUNCTION ${
    t("flow_tokens")
  }(tokens double precision, tokens_at timestamptz, rate_limit integer, rate_period double precision,
    rate_burst integer, at timestamptz)
  RETURNS double precision
  LANGUAGE sql IMMUTABLE
AS $tokens$
SELECT CASE WHEN rate_limit IS NOT NULL THEN least(rate_burst::double precision, coalesce(
  tokens + greatest(extract(epoch FROM at - tokens_at)::double precision, 0) * rate_limit / rate_period,
  rate_burst)) END
$tokens$`
