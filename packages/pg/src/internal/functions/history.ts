/**
 * The outbox history's days: one partition per UTC day of delivery, made ahead by
 * `outbox_history_prepare` and dropped whole by retention, whatever the day held. Retention is
 * two calls, each its own transaction: `outbox_history_empty_before` truncates every day before
 * the cut-off (the slow part, the file system freeing the day's files, under the day's own lock:
 * marks write today's day and go on), then `outbox_history_drop_before` drops the emptied days
 * (a moment's lock on the history, which a mark waits for). Dropped at once, a day of 10,000,000
 * messages held the history's lock while its 3.6 GB were freed, and every mark waited 1.6 s.
 * They run as the schema's owner (SECURITY DEFINER): a runtime role that may not create or drop
 * tables calls them. A day nobody made in time goes to the default partition, and stays there (a
 * day with rows in the default is not made afterwards); retention deletes from it row by row. An
 * emptied day is counted by its statistics once analyzed (the count a purge returns is then the
 * planner's estimate for it). Lock waits are bounded: a maker, emptier or dropper that cannot
 * have its lock within two seconds fails, and is tried again later; two purges at once count a
 * day once and neither fails on a day the other dropped.
 */
import type { Tables } from "../flow/limits.js"

const dayName = "'outbox_history_' || to_char(day, 'YYYYMMDD')"

/**
 * A loop over the history's days that end at or before `p_cutoff`, oldest first: each day locked
 * (`ACCESS EXCLUSIVE`, the day's own lock; with `history`, the history's first, the order every
 * query of the history locks them in, so a drop never waits for the history while it holds a
 * day) before `body` runs on it (its name: `part`); a day a purge under way dropped since the
 * days were listed is passed over.
 */
const eachDayBefore = (t: Tables, body: string, lock: { readonly history: boolean }) =>
  `FOR part IN
    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = '${t("outbox_history")}'::regclass AND c.relname ~ '^outbox_history_[0-9]{8}$'
       AND (to_date(substr(c.relname, 16), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= p_cutoff
     ORDER BY c.relname
  LOOP
    BEGIN
      EXECUTE format('LOCK TABLE ${
    lock.history ? `ONLY ${t("outbox_history")}, ` : ""
  }%I.%I IN ACCESS EXCLUSIVE MODE', ns, part);
${body}
    EXCEPTION WHEN undefined_table THEN
      NULL;
    END;
  END LOOP;`

/**
 * The head of a function run as the schema's owner, with bounded lock waits, up to its
 * declarations: `ns`, the history's schema, is declared first.
 */
const definer = (t: Tables, signature: string, returns: string) =>
  `CREATE OR REPLACE FUNCTION ${t(signature.slice(0, signature.indexOf("(")))}${signature.slice(signature.indexOf("("))}
  RETURNS ${returns}
  LANGUAGE plpgsql
  SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
  SET lock_timeout = '2s'
AS $history$
DECLARE
  ns text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE c.oid = '${t("outbox_history")}'::regclass);`

export const historyFunctions = (t: Tables): ReadonlyArray<string> => [
  `${definer(t, "outbox_history_prepare(p_days integer)", "integer")}
  day date;
  made integer := 0;
BEGIN
  -- One maker at a time (its own key space beside the limits lock).
  PERFORM pg_advisory_xact_lock('${t("outbox_history")}'::regclass::oid::integer, 28);
  FOR i IN 0 .. least(greatest(p_days, 0), 366) LOOP
    day := (now() AT TIME ZONE 'UTC')::date + i;
    CONTINUE WHEN to_regclass(format('%I.%I', ns, ${dayName})) IS NOT NULL;
    CONTINUE WHEN EXISTS (
      SELECT 1 FROM ${t("outbox_history_default")} d
       WHERE d.projected_at >= day::timestamp AT TIME ZONE 'UTC'
         AND d.projected_at < (day + 1)::timestamp AT TIME ZONE 'UTC');
    -- Made apart, then attached: attaching takes no lock that stops the marks writing the history.
    EXECUTE format('CREATE TABLE %I.%I (LIKE ${t("outbox_history")} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                   ns, ${dayName});
    EXECUTE format('ALTER TABLE ${t("outbox_history")} ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                   ns, ${dayName}, day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
    made := made + 1;
  END LOOP;
  RETURN made;
END
$history$`,
  `${definer(t, "outbox_history_empty_before(p_cutoff timestamptz)", "bigint")}
  part text;
  n bigint;
  emptied bigint := 0;
BEGIN
  -- A day is locked before it is counted: a purge that emptied it first has committed, and its
  -- statistics say so (a truncated day is unanalyzed, so counted row by row: none).
  ${
    eachDayBefore(
      t,
      `      -- A day analyzed (autovacuum analyzes a day within minutes of its writes) is counted by
      -- its statistics: counting its rows would read the whole day, and the point of a day is
      -- that emptying it does not. One never analyzed is counted row by row.
      SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END INTO n
        FROM pg_class c WHERE c.oid = format('%I.%I', ns, part)::regclass;
      IF n IS NULL THEN
        EXECUTE format('SELECT count(*) FROM %I.%I', ns, part) INTO n;
      END IF;
      EXECUTE format('TRUNCATE %I.%I', ns, part);
      emptied := emptied + n;`,
      // A TRUNCATE of a day never asks for the history's lock: the day's own is all it holds.
      { history: false }
    )
  }
  RETURN emptied;
END
$history$`,
  `${definer(t, "outbox_history_drop_before(p_cutoff timestamptz)", "integer")}
  part text;
  holds boolean;
  dropped integer := 0;
BEGIN
  ${
    eachDayBefore(
      t,
      `      -- Only an emptied day: a day with messages (nobody emptied it, or a later cut-off than
      -- the emptying's) is left whole for a purge to count.
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I)', ns, part) INTO holds;
      CONTINUE WHEN holds;
      EXECUTE format('DROP TABLE %I.%I', ns, part);
      dropped := dropped + 1;`,
      { history: true }
    )
  }
  RETURN dropped;
END
$history$`
]
