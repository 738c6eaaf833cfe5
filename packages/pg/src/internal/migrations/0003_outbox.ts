/** Version 3, released: never edit it (a test holds its text); add the next version instead. */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 3,
  name: "transactional outbox",
  statements: (t) => [
    `CREATE TABLE ${t("outbox")} (
        id bigint GENERATED ALWAYS AS IDENTITY,
        topic text NOT NULL,
        ordering_key text,
        payload jsonb NOT NULL,
        headers jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now(),
        available_at timestamptz NOT NULL DEFAULT now(),
        claimed_by text,
        claimed_until timestamptz,
        claim_generation bigint NOT NULL DEFAULT 0,
        attempt_count integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL DEFAULT 25,
        projected_at timestamptz,
        dead_at timestamptz,
        last_error text,
        CONSTRAINT outbox_pkey PRIMARY KEY (id),
        CONSTRAINT outbox_max_attempts_check CHECK (max_attempts > 0),
        CONSTRAINT outbox_final_state_check CHECK (projected_at IS NULL OR dead_at IS NULL)
      )`,
    // The claim walks this index in id order: it holds only open rows, so a claim costs
    // O(batch) however many projected rows wait for purge.
    `CREATE INDEX outbox_open_idx ON ${t("outbox")} (id) WHERE projected_at IS NULL AND dead_at IS NULL`,
    `CREATE INDEX outbox_projected_at_idx ON ${t("outbox")} (projected_at) WHERE projected_at IS NOT NULL`,
    `CREATE INDEX outbox_dead_idx ON ${t("outbox")} (id) WHERE dead_at IS NOT NULL`
  ]
}
