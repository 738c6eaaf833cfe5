/** Version 4, released: never edit it (a test holds its text); add the next version instead. */
import type { Migration } from "../../Migrations.js"

export const migration: Migration = {
  version: 4,
  name: "transactional inbox",
  statements: (t) => [
    `CREATE TABLE ${t("inbox")} (
        id bigint GENERATED ALWAYS AS IDENTITY,
        consumer text NOT NULL,
        message_id text NOT NULL,
        payload jsonb,
        headers jsonb NOT NULL DEFAULT '{}',
        received_at timestamptz NOT NULL DEFAULT now(),
        available_at timestamptz NOT NULL DEFAULT now(),
        claimed_by text,
        claimed_until timestamptz,
        claim_generation bigint NOT NULL DEFAULT 0,
        attempt_count integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL DEFAULT 25,
        processed_at timestamptz,
        dead_at timestamptz,
        last_error text,
        CONSTRAINT inbox_pkey PRIMARY KEY (id),
        CONSTRAINT inbox_receipt_key UNIQUE (consumer, message_id),
        CONSTRAINT inbox_max_attempts_check CHECK (max_attempts > 0),
        CONSTRAINT inbox_final_state_check CHECK (processed_at IS NULL OR dead_at IS NULL)
      )`,
    `CREATE INDEX inbox_open_idx ON ${t("inbox")} (consumer, id) WHERE processed_at IS NULL AND dead_at IS NULL`,
    `CREATE INDEX inbox_processed_at_idx ON ${t("inbox")} (processed_at) WHERE processed_at IS NOT NULL`,
    `CREATE INDEX inbox_dead_idx ON ${t("inbox")} (id) WHERE dead_at IS NOT NULL`
  ]
}
