/**
 * The admin page's views of the other stores: the inbox (consumers and their receipts), the
 * mutation ledger (a key's record) and the schema (version and drift). Same rules as
 * views.ts: every value escaped, stored responses only when the page shows payloads.
 */
import type { ConsumerStats } from "@effect-durable/pg/InboxAdmin"
import type * as LeasedQueue from "@effect-durable/pg/LeasedQueue"
import type { SchemaDrift } from "@effect-durable/pg/Migrations"
import type * as MutationLedger from "@effect-durable/pg/MutationLedger"
import type { Check } from "../diagnostics.js"
import { Html, html } from "./html.js"
import type { Receipt } from "./queries.js"
import { badge, consumersTable, layout, num, time, type ViewContext } from "./views.js"

export interface InboxData {
  readonly consumers: ReadonlyArray<ConsumerStats>
  readonly consumer: string | undefined
  readonly dead: LeasedQueue.DeadLetterPage<{ readonly consumer: string; readonly messageId: string }> | undefined
  readonly receipts: ReadonlyArray<Receipt> | undefined
}

/** A stored entry still to be processed: hurried when it waits for its retry, moved aside when not held. */
const receiptActions = (r: Receipt): Html | string =>
  r.state === "delayed" || r.state === "ready"
    ? html`${
      r.state === "delayed"
        ? html`<button data-action="inbox-retry-now" data-scope="one" data-id="${r.id}">Retry now</button> `
        : ""
    }<button class="danger" data-action="inbox-move-aside" data-scope="one" data-id="${r.id}">Move aside</button>`
    : ""

export const inboxPage = (ctx: ViewContext, data: InboxData): Html => {
  const consumer = data.consumer
  const dead = data.dead === undefined || consumer === undefined ?
    "" :
    html`<h2>Dead entries of ${consumer}</h2>${
      data.dead.items.length === 0 ?
        html`<p class="note">None.</p>` :
        html`${
          ctx.readOnly ?
            "" :
            html`<div class="actions"><button data-action="inbox-redrive" data-scope="selected" data-consumer="${consumer}">Redrive selected</button>
<button class="danger" data-action="inbox-discard" data-scope="selected" data-consumer="${consumer}">Discard selected</button></div>`
        }<table><thead><tr>${
          ctx.readOnly ? "" : html`<th><input type="checkbox" id="select-all" aria-label="select all"></th>`
        }<th>Id</th><th>Message id</th><th class="num">Attempts</th><th>Died</th><th>Last error</th></tr></thead><tbody>${
          data.dead.items.map((d) =>
            html`<tr data-row-id="${d.id}">${
              ctx.readOnly ? "" : html`<td><input type="checkbox" name="select" value="${d.id}"></td>`
            }<td>${d.id}</td><td><code>${d.messageId}</code></td>${num(d.attempts)}<td class="state">${
              time(d.deadAt)
            }</td><td>${d.lastError ?? ""}</td></tr>`
          )
        }</tbody></table>`
    }`
  const receipts = data.receipts === undefined || consumer === undefined ?
    "" :
    html`<h2>Latest receipts of ${consumer}</h2>${
      data.receipts.length === 0 ?
        html`<p class="note">None.</p>` :
        html`<table id="receipts"><thead><tr><th>Id</th><th>Message id</th><th>State</th><th class="num">Attempts</th><th>Received</th><th>Processed</th><th>Last error</th>${
          ctx.readOnly ? "" : html`<th></th>`
        }</tr></thead><tbody>${
          data.receipts.map((r) =>
            html`<tr data-row-id="${r.id}"><td>${r.id}</td><td><code>${r.messageId}</code></td><td class="state">${
              badge(r.state)
            }</td>${num(r.attempts)}<td>${time(r.receivedAt)}</td><td>${time(r.processedAt)}</td><td>${
              r.lastError ?? ""
            }</td>${ctx.readOnly ? "" : html`<td class="actions">${receiptActions(r)}</td>`}</tr>`
          )
        }</tbody></table>`
    }`
  return layout(
    ctx,
    "inbox",
    "Inbox",
    html`<h1>Inbox</h1>
<p class="note">A receipt per consumer and message id: a redelivery finds it and runs nothing. Keep receipts longer than the broker can redeliver.</p>
${consumersTable(ctx, data.consumers)}
${dead}
${receipts}`
  )
}

// ---------------------------------------------------------------- ledger

export interface LedgerData {
  readonly identity: MutationLedger.MutationIdentity | undefined
  readonly record: MutationLedger.StoredMutation | undefined
  readonly error: string | undefined
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

export const ledgerPage = (ctx: ViewContext, data: LedgerData): Html => {
  const id = data.identity
  const input = (key: "subject" | "operation" | "key", label: string) =>
    html`<label>${label}<input name="${key}" value="${id?.[key] ?? ""}" required></label>`
  const r = data.record
  const result = id === undefined || data.error !== undefined
    ? ""
    : r === undefined
    ? html`<p class="note" id="ledger-result">No record for ${id.subject} / ${id.operation} / ${id.key}: a request with this key would run as a first request.</p>`
    : html`<dl class="fields" id="ledger-result">
<dt>Status</dt><dd>${badge(r.status === "accepted" ? "ready" : "dead")} ${r.status} (the effect was ${
      r.status === "accepted" ? "applied" : "not applied"
    })</dd>
<dt>Kind</dt><dd>${r.kind}</dd>
<dt>Recorded</dt><dd>${time(r.recordedAt)}</dd>
<dt>Fingerprint</dt><dd><code>${hex(r.fingerprint)}</code></dd>
<dt>Eligibility</dt><dd><code>${r.eligibility.length === 0 ? "(empty)" : hex(r.eligibility)}</code></dd>
<dt>Response</dt><dd>${
      ctx.showPayloads
        ? html`<pre>${
          r.response === null && r.body.length > 0
            ? `${r.body.length} bytes; meta ${JSON.stringify(r.meta)}`
            : JSON.stringify(r.response, null, 2)
        }</pre>`
        : "hidden (stored responses are shown only when payloads are)"
    }</dd>
<dt>Conflicts</dt><dd>A retry conflicts (and changes nothing) when its kind, eligibility or fingerprint differ from these; an exact retry replays the response.</dd>
</dl>`
  return layout(
    ctx,
    "ledger",
    "Ledger",
    html`<h1>Mutation ledger</h1>
<form class="filter" method="get" action="${ctx.base}/ledger">${input("subject", "Subject")}${
      input("operation", "Operation")
    }${input("key", "Idempotency key")}
<button class="primary" type="submit">Look up</button></form>
${data.error === undefined ? "" : html`<p class="error">${data.error}</p>`}
${result}`
  )
}

// ---------------------------------------------------------------- schema

export interface SchemaData {
  readonly schema: string
  readonly version: number
  readonly latest: number
  readonly pending: ReadonlyArray<{ readonly version: number; readonly name: string }>
}

/** What the schema's drift check found (the answer to its action). */
export const driftFragment = (_ctx: ViewContext, drift: ReadonlyArray<SchemaDrift>): Html =>
  drift.length === 0
    ? html`<p class="check-ok" id="drift">No drift: the schema is what the migrations build.</p>`
    : html`<table id="drift"><thead><tr><th>Kind</th><th>Object</th><th>Expected</th><th>Actual</th></tr></thead><tbody>${
      drift.map((d) =>
        html`<tr><td>${d.kind}</td><td>${d.object}</td><td><code>${d.expected ?? "-"}</code></td><td><code>${
          d.actual ?? "-"
        }</code></td></tr>`
      )
    }</tbody></table>`

/** What the doctor's checks found (the answer to their action). */
export const checksFragment = (_ctx: ViewContext, checks: ReadonlyArray<Check>): Html =>
  html`<table id="checks"><tbody>${
    checks.map((c) =>
      html`<tr><td class="check-${c.status}">${c.status}</td><td>${c.name}</td><td>${c.detail}</td></tr>`
    )
  }</tbody></table>`

/**
 * A check the page runs when asked: an action (POST) of a writable page, since it runs more
 * than reads (migrations on a scratch schema; LISTEN and reserved sessions).
 */
const onDemand = (ctx: ViewContext, action: "drift" | "checks", label: string, note: string) =>
  html`<div id="${action}-result">${
    ctx.readOnly
      ? html`<p class="note">${label}: not on a read-only page (${note}); run <code>effect-durable ${
        action === "drift" ? "verify" : "doctor"
      }</code>.</p>`
      : html`<p><button data-action="${action}" type="button">${label}</button> <span class="note">(${note})</span></p>`
  }</div>`

export const schemaPage = (ctx: ViewContext, data: SchemaData): Html =>
  layout(
    ctx,
    "schema",
    "Schema",
    html`<h1>Schema <code>${data.schema}</code></h1>
<dl class="fields"><dt>Version</dt><dd id="schema-version">${data.version} (this release: ${data.latest})</dd>
<dt>Pending</dt><dd>${
      data.pending.length === 0 ? "none" : data.pending.map((p) => `${p.version} ${p.name}`).join("; ")
    }</dd></dl>
<h2>Drift</h2>
${
      onDemand(
        ctx,
        "drift",
        "Compare with the migrations",
        "applies them to a scratch schema in a transaction that is rolled back; needs the owner role"
      )
    }
<h2>Checks</h2>
${onDemand(ctx, "checks", "Run the doctor's checks", "LISTEN/NOTIFY, pooler, table bloat, vacuum's horizon")}`
  )
