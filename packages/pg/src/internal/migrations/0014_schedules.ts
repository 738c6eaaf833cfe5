/**
 * Version 14, released: never edit it (a test holds its text); add the next version instead.
 *
 * Schedules (`Schedules`): cron expressions that enqueue one outbox message per slot, across
 * any number of processes and with no leader.
 *
 * - `schedules`: one row per schedule: its cron expression (5 or 6 fields) and time zone, the
 *   message it enqueues (topic, payload, ordering key), its overlap policy (`skip`: not while
 *   the previous slot's message is still open; `buffer-one`: not while one is still waiting
 *   to be delivered; `allow`), its catch-up window (slots due longer ago than that when a
 *   process decides them are missed), whether it is paused and by whom, and `next_slot`, the
 *   first slot not yet decided. A process decides a schedule's due slots holding its row
 *   (`FOR UPDATE SKIP LOCKED`) and moves `next_slot` past them in the same transaction, so each
 *   slot is decided once; the counters say how many slots were enqueued, skipped by the
 *   overlap policy, missed and backfilled.
 * - `schedule_slots`: every slot that got a message (or was skipped), keyed (schedule, slot):
 *   the second guard of once per slot (a backfill over a range fills only the slots without a
 *   row), and what the overlap policy reads (the messages of the latest slots).
 */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 14,
  name: "schedules",
  statements: (t) => [
    `CREATE TABLE ${t("schedules")} (
        name text NOT NULL,
        cron text NOT NULL,
        time_zone text NOT NULL,
        topic text NOT NULL,
        payload jsonb NOT NULL,
        ordering_key text,
        overlap text NOT NULL,
        catch_up_seconds double precision NOT NULL,
        next_slot timestamptz NOT NULL,
        paused_at timestamptz,
        paused_by text,
        enqueued bigint NOT NULL DEFAULT 0,
        skipped bigint NOT NULL DEFAULT 0,
        missed bigint NOT NULL DEFAULT 0,
        backfilled bigint NOT NULL DEFAULT 0,
        last_slot timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT schedules_pkey PRIMARY KEY (name),
        CONSTRAINT schedules_overlap_check CHECK (overlap IN ('skip', 'buffer-one', 'allow')),
        CONSTRAINT schedules_catch_up_check CHECK (catch_up_seconds >= 0)
      )`,
    `CREATE TABLE ${t("schedule_slots")} (
        schedule text NOT NULL,
        slot timestamptz NOT NULL,
        outcome text NOT NULL,
        message_id bigint,
        decided_at timestamptz NOT NULL DEFAULT now(),
        decided_by text NOT NULL,
        CONSTRAINT schedule_slots_pkey PRIMARY KEY (schedule, slot),
        CONSTRAINT schedule_slots_outcome_check CHECK (outcome IN ('enqueued', 'skipped', 'backfilled')),
        CONSTRAINT schedule_slots_message_check CHECK ((outcome = 'skipped') = (message_id IS NULL))
      )`
  ]
}
