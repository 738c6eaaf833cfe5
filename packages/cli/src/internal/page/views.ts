/**
 * The admin page's HTML, one function per view, from data the queries read. Every value is
 * escaped (`html`), payloads and stored responses appear only when the page was configured to
 * show them (so does the filter on payload values), and action buttons appear only on a
 * writable page (the server refuses writes on a read-only one anyway).
 */
import type { ConsumerStats } from "@effect-durable/pg/InboxAdmin"
import type { TopicStats } from "@effect-durable/pg/OutboxAdmin"
import type * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import { age, count, plural } from "../output.js"
import { type Sample, topicChart } from "./chart.js"
import { toQuery } from "./filters.js"
import { Html, html, raw } from "./html.js"

export type Section =
  | "overview"
  | "messages"
  | "dead"
  | "inbox"
  | "workflows"
  | "schedules"
  | "feeds"
  | "limits"
  | "ledger"
  | "schema"

export interface ViewContext {
  readonly base: string
  readonly readOnly: boolean
  readonly showPayloads: boolean
  readonly who: string
  readonly version: { readonly schema: string; readonly version: number; readonly latest: number } | undefined
}

const NAV: ReadonlyArray<readonly [Section, string, string]> = [
  ["overview", "/", "Overview"],
  ["messages", "/messages", "Messages"],
  ["dead", "/dead-letters", "Dead letters"],
  ["inbox", "/inbox", "Inbox"],
  ["workflows", "/workflows", "Workflows"],
  ["schedules", "/schedules", "Schedules"],
  ["feeds", "/feeds", "Feeds"],
  ["limits", "/limits", "Limits"],
  ["ledger", "/ledger", "Ledger"],
  ["schema", "/schema", "Schema"]
]

export const time = (iso: string | null) => (iso === null ? "-" : iso.slice(0, 19).replace("T", " "))
export const num = (n: number) => html`<td class="num">${count(n)}</td>`
export const badge = (state: string) => html`<span class="badge ${state}">${state}</span>`
export const link = (ctx: ViewContext, path: string, query: string, text: Html | string) =>
  html`<a href="${ctx.base}${path}${query === "" ? "" : `?${query}`}">${text}</a>`

export const layout = (ctx: ViewContext, current: Section, title: string, content: Html): Html => {
  const v = ctx.version
  const banner = v !== undefined && v.version !== v.latest
    ? html`<p class="banner">Schema <code>${v.schema}</code> is at version ${v.version}; this release needs ${v.latest}. ${
      v.version < v.latest ? "Run effect-durable migrate: until then some views fail." : "A newer release migrated it."
    }</p>`
    : ""
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · effect-durable</title>
<link rel="stylesheet" href="${ctx.base}/assets/app.css">
<script src="${ctx.base}/assets/app.js" defer></script>
</head>
<body data-base="${ctx.base}">
<header>
<strong>effect-durable</strong>
<nav>${
    NAV.map(([section, path, label]) =>
      html`<a href="${ctx.base}${path}"${
        raw(section === current ? " class=\"current\" aria-current=\"page\"" : "")
      }>${label}</a>`
    )
  }</nav>
<span class="meta">${v === undefined ? "" : `schema ${v.schema} · version ${v.version}`}${
    ctx.readOnly ? " · read-only" : ""
  } · ${ctx.who}</span>
</header>
<main>
${banner}
${content}
</main>
<div id="status" role="status" aria-live="polite"></div>
</body>
</html>`
}

// ---------------------------------------------------------------- overview

export interface OverviewData {
  readonly topics: ReadonlyArray<TopicStats>
  readonly consumers: ReadonlyArray<ConsumerStats>
  readonly histories: ReadonlyMap<string, ReadonlyArray<OutboxSearch.HistoryBucket>>
  readonly groups: ReadonlyArray<OutboxSearch.DeadLetterGroup>
}

const topicActions = (ctx: ViewContext, t: TopicStats) =>
  ctx.readOnly
    ? ""
    : t.paused
    ? html`<button data-action="resume" data-topic="${t.topic}">Resume</button>`
    : html`<button data-action="pause" data-topic="${t.topic}">Pause</button>`

export const overviewFragment = (
  ctx: ViewContext,
  data: OverviewData,
  samples: ReadonlyMap<string, ReadonlyArray<Sample>>
): Html => {
  const total = (pick: (t: TopicStats) => number) => data.topics.reduce((sum, t) => sum + pick(t), 0)
  const topics = data.topics.length === 0
    ? html`<p class="note">No outbox messages yet.</p>`
    : html`<table id="topics">
<thead><tr><th>Topic</th><th class="num">Ready</th><th class="num">Delayed</th><th class="num">Claimed</th><th class="num">Dead</th><th class="num">Projected</th><th class="num">Oldest ready</th><th>State</th><th></th></tr></thead>
<tbody>${
      data.topics.map((t) =>
        html`<tr data-topic="${t.topic}">
<td>${link(ctx, "/messages", toQuery({ topic: t.topic }), t.topic)}</td>${num(t.ready)}${num(t.delayed)}${
          num(t.claimed)
        }
<td class="num">${t.dead === 0 ? "0" : link(ctx, "/dead-letters", toQuery({ topic: t.topic }), count(t.dead))}</td>${
          num(t.projected)
        }
<td class="num">${age(t.oldestReadySeconds)}</td><td class="topic-state">${
          badge(t.paused ? "paused" : "running")
        }</td><td>${topicActions(ctx, t)}</td></tr>`
      )
    }</tbody></table>`
  const charts = data.topics.filter((t) => data.histories.has(t.topic)).map((t) =>
    html`<div class="card"><h3><span>${t.topic}</span>${t.paused ? badge("paused") : ""}</h3>
<div class="figures">ready ${count(t.ready)} · dead ${count(t.dead)} · oldest ready ${age(t.oldestReadySeconds)}</div>
${raw(topicChart(t.topic, data.histories.get(t.topic)!, samples.get(t.topic) ?? []))}</div>`
  )
  const groups = data.groups.length === 0
    ? html`<p class="note">No dead letters.</p>`
    : html`<table><thead><tr><th>Topic</th><th>Error</th><th class="num">Messages</th><th>Last died</th></tr></thead><tbody>${
      data.groups.map((g) =>
        html`<tr><td>${g.topic}</td><td>${
          link(ctx, "/messages", toQuery({ topic: g.topic, state: "dead", error: g.error }), g.example ?? g.error)
        }</td>${num(g.count)}<td>${time(g.lastDeadAt)}</td></tr>`
      )
    }</tbody></table>`
  return html`<p class="note" id="totals">${plural(data.topics.length, "topic")} · ${
    count(total((t) => t.ready))
  } ready · ${count(total((t) => t.claimed))} claimed · ${count(total((t) => t.dead))} dead · ${
    plural(data.consumers.length, "inbox consumer")
  }</p>
${topics}
<h2>Last 15 minutes</h2>
<p class="legend"><i class="delivered"></i>delivered per 30 s<i class="ready"></i>ready<i class="dead"></i>dead (as sampled by this page)<i class="lag"></i>longest lag</p>
<div class="cards">${charts}</div>
<h2>Dead letters by error</h2>
${groups}
<h2>Inbox consumers</h2>
${consumersTable(ctx, data.consumers)}`
}

export const overviewPage = (ctx: ViewContext, fragment: Html): Html =>
  layout(
    ctx,
    "overview",
    "Overview",
    html`<div class="actions"><h1>Overview</h1><button id="refresh-toggle" type="button">Pause refresh</button></div>
<section id="live" data-refresh="${ctx.base}/fragments/overview" data-interval="5000">${fragment}</section>`
  )

export const consumersTable = (ctx: ViewContext, consumers: ReadonlyArray<ConsumerStats>) =>
  consumers.length === 0
    ? html`<p class="note">No inbox receipts yet.</p>`
    : html`<table id="consumers"><thead><tr><th>Consumer</th><th class="num">Processed</th><th class="num">Ready</th><th class="num">Delayed</th><th class="num">Claimed</th><th class="num">Dead</th><th class="num">Oldest ready</th></tr></thead><tbody>${
      consumers.map((c) =>
        html`<tr><td>${link(ctx, "/inbox", new URLSearchParams({ consumer: c.consumer }).toString(), c.consumer)}</td>${
          num(c.processed)
        }${num(c.ready)}${num(c.delayed)}${num(c.claimed)}${num(c.dead)}<td class="num">${
          age(c.oldestReadySeconds)
        }</td></tr>`
      )
    }</tbody></table>`

// ---------------------------------------------------------------- messages

export interface MessagesData {
  readonly params: URLSearchParams
  /** The filter's own query string (no paging): what "all matching" acts on. */
  readonly filterQuery: string
  readonly page: OutboxSearch.MessagePage | undefined
  readonly count: OutboxSearch.MatchCount | undefined
  readonly error: string | undefined
}

/** The state filter's choices: any, or one of the lifecycle's states by the outbox's names. */
const STATES = ["", ...QueueLifecycle.OUTBOX_STATE_NAMES] as const

const filterForm = (ctx: ViewContext, params: URLSearchParams) => {
  const value = (key: string) => params.get(key) ?? ""
  const field = (key: string, label: string, placeholder: string, wide = false) =>
    html`<label>${label}<input name="${key}" value="${value(key)}" placeholder="${placeholder}"${
      raw(wide ? " class=\"wide\"" : "")
    }></label>`
  return html`<form class="filter" method="get" action="${ctx.base}/messages">
${field("id", "Ids", "12, 13")}${field("topic", "Topic", "orders")}${field("key", "Ordering key", "")}
<label>State<select name="state">${
    STATES.map((s) =>
      html`<option value="${s}"${raw(value("state") === s ? " selected" : "")}>${s === "" ? "any" : s}</option>`
    )
  }</select></label>
${field("attempts", "Attempts ≥", "3")}${field("older", "Older than", "7d")}
${ctx.showPayloads ? field("payload", "Payload key=value", "customer.id=42", true) : ""}${
    field("header", "Header key=value", "tenant=acme")
  }
${params.get("error") === null ? "" : html`<input type="hidden" name="error" value="${value("error")}">`}
<button class="primary" type="submit">Filter</button> <a class="button" href="${ctx.base}/messages">Clear</a>
</form>`
}

export const messagesPage = (ctx: ViewContext, data: MessagesData): Html => {
  const items = data.page?.items ?? []
  const error = data.params.get("error")
  const dead = data.count?.count ?? 0
  const bulk = ctx.readOnly || data.page === undefined
    ? ""
    : html`<div class="actions">
<button data-action="redrive" data-scope="selected">Redrive selected</button>
<button class="danger" data-action="discard" data-scope="selected">Discard selected</button>
<span class="note">Everything matching the filter (dead ones only):</span>
<button data-action="redrive" data-scope="matching" data-filter="${data.filterQuery}">Redrive all matching</button>
<button class="danger" data-action="discard" data-scope="matching" data-filter="${data.filterQuery}">Discard all matching</button>
</div>`
  const next = data.page?.next
  const pager = next === undefined ? "" : (() => {
    const params = new URLSearchParams(data.params)
    params.set("before", next)
    return html`<p>${link(ctx, "/messages", params.toString(), "Older messages →")}</p>`
  })()
  const table = items.length === 0
    ? html`<p class="note">No message matches.</p>`
    : html`<table id="messages"><thead><tr>${
      ctx.readOnly ? "" : html`<th><input type="checkbox" id="select-all" aria-label="select all"></th>`
    }<th>Id</th><th>Topic</th><th>Ordering key</th><th>State</th><th class="num">Attempts</th><th>Created</th><th>Last error</th></tr></thead><tbody>${
      items.map((m) =>
        html`<tr data-row-id="${m.id}">${
          ctx.readOnly
            ? ""
            : html`<td><input type="checkbox" name="select" value="${m.id}" aria-label="select ${m.id}"></td>`
        }
<td>${link(ctx, `/messages/${m.id}`, "", m.id)}</td><td>${m.topic}</td><td>${
          m.orderingKey ?? ""
        }</td><td class="state">${badge(m.state)}</td>${num(m.attempts)}<td>${time(m.createdAt)}</td><td>${
          m.lastError ?? ""
        }</td></tr>`
      )
    }</tbody></table>`
  return layout(
    ctx,
    "messages",
    "Messages",
    html`<h1>Messages</h1>
${filterForm(ctx, data.params)}
${error === null ? "" : html`<p class="note">Error group: <code>${error}</code></p>`}
${data.error === undefined ? "" : html`<p class="error">${data.error}</p>`}
${data.count === undefined ? "" : html`<p class="note" id="match-count">${count(data.count.count)} matching</p>`}
${dead > 0 || items.length > 0 ? bulk : ""}
${table}
${pager}`
  )
}

export const messagePage = (ctx: ViewContext, m: OutboxSearch.MessageDetail): Html => {
  const field = (name: string, value: Html | string | number | null) => html`<dt>${name}</dt><dd>${value ?? "-"}</dd>`
  // What an operator can do in each state: a dead letter is redriven or discarded; a message
  // waiting for its retry is hurried; one still to be delivered and not held by a worker can be
  // moved aside (it stops holding back its ordering key).
  // Any message still to be delivered can be cancelled (a delivery under way is stopped); a
  // cancelled one restored or discarded.
  const cancel = html`<button class="danger" data-action="cancel" data-scope="one" data-id="${m.id}">Cancel</button>`
  const actions = ctx.readOnly
    ? ""
    : m.state === "dead"
    ? html`<div class="actions"><button data-action="redrive" data-scope="one" data-id="${m.id}">Redrive</button>
<button class="danger" data-action="discard" data-scope="one" data-id="${m.id}">Discard</button></div>`
    : m.state === "cancelled"
    ? html`<div class="actions"><button data-action="restore" data-scope="one" data-id="${m.id}">Restore</button>
<button class="danger" data-action="discard" data-scope="one" data-id="${m.id}">Discard</button></div>`
    : m.state === "delayed" || m.state === "ready"
    ? html`<div class="actions">${
      m.state === "delayed" ?
        html`<button data-action="retry-now" data-scope="one" data-id="${m.id}">Retry now</button>
` :
        ""
    }<button class="danger" data-action="move-aside" data-scope="one" data-id="${m.id}">Move aside</button>
${cancel}</div>`
    : m.state === "claimed"
    ? html`<div class="actions">${cancel}</div>`
    : ""
  const permanent = m.state === "dead" && QueueLifecycle.diedPermanently(m.lastError)
  return layout(
    ctx,
    "messages",
    `Message ${m.id}`,
    html`<h1>Message ${m.id} ${badge(m.state)}</h1>
${actions}
<dl class="fields">
${field("Topic", link(ctx, "/messages", toQuery({ topic: m.topic }), m.topic))}
${field("Ordering key", m.orderingKey)}
${
      field(
        "Attempts",
        permanent
          ? `${m.attempts}: a permanent failure (never retried), ${m.leaseExpiries} leases ran out`
          : `${m.attempts} of ${m.maxAttempts}: ${m.failures} failed, ${m.leaseExpiries} leases ran out`
      )
    }
${
      field(
        "Lease holder",
        m.claimedBy === null
          ? null
          : `${m.claimedBy}, generation ${m.claimGeneration}${
            m.claimedUntil === null ? "" : `, until ${time(m.claimedUntil)}`
          }`
      )
    }
${field("Created", time(m.createdAt))}
${field("Available", time(m.availableAt))}
${field("Projected", time(m.projectedAt))}
${field("Dead", time(m.deadAt))}
${field("Last error", m.lastError === null ? null : html`<pre>${m.lastError}</pre>`)}
</dl>
<p class="note">The last error in full (a lease that ran out adds its reason to the delivery error before it); below, each failed delivery's error (the last 10).</p>
<h2>Failed deliveries</h2>
${
      m.failureHistory.length === 0
        ? html`<p class="note" id="failures">None.</p>`
        : html`<table id="failures"><thead><tr><th class="num">Attempt</th><th>When</th><th>Worker</th><th>Error</th></tr></thead><tbody>${
          m.failureHistory.map((f) =>
            html`<tr><td class="num">${f.attempt}</td><td>${time(f.at)}</td><td>${
              f.worker ?? "-"
            }</td><td>${f.error}</td></tr>`
          )
        }</tbody></table>`
    }
<h2>Headers</h2>
<pre>${JSON.stringify(m.headers, null, 2)}</pre>
<h2>Payload</h2>
${
      ctx.showPayloads
        ? html`<pre id="payload">${JSON.stringify(m.payload, null, 2)}</pre>`
        : html`<p class="note" id="payload">Hidden: payloads are shown only when the page is configured to (showPayloads, or --show-payloads).</p>`
    }`
  )
}

// ---------------------------------------------------------------- dead letters

export const deadLettersPage = (
  ctx: ViewContext,
  groups: ReadonlyArray<OutboxSearch.DeadLetterGroup>,
  topic: string | undefined
): Html =>
  layout(
    ctx,
    "dead",
    "Dead letters",
    html`<h1>Dead letters${topic === undefined ? "" : html` of ${topic}`}</h1>
<p class="note">Grouped by topic and error (digits folded to #: the group, which the filter's Error field and <code>--error</code> take as shown, as a raw error, or its start), so one bad deploy is one row.</p>
${
      groups.length === 0 ?
        html`<p class="note">No dead letters.</p>` :
        html`<table id="groups"><thead><tr><th>Topic</th><th>Error</th><th class="num">Messages</th><th>First died</th><th>Last died</th><th></th></tr></thead><tbody>${
          groups.map((g) => {
            const query = toQuery({ topic: g.topic, state: "dead", error: g.error })
            return html`<tr><td>${g.topic}</td><td><code>${
              g.example ?? g.error
            }</code><div class="note">group <code class="group">${g.error}</code></div></td>${num(g.count)}<td>${
              time(g.firstDeadAt)
            }</td><td>${time(g.lastDeadAt)}</td>
<td class="actions">${link(ctx, "/messages", query, "View")}${
              ctx.readOnly ?
                "" :
                html` <button data-action="redrive" data-scope="matching" data-filter="${query}">Redrive</button>
<button class="danger" data-action="discard" data-scope="matching" data-filter="${query}">Discard</button>`
            }</td></tr>`
          })
        }</tbody></table>`
    }`
  )

// ---------------------------------------------------------------- inbox

export const errorPage = (ctx: ViewContext, title: string, message: string): Html =>
  layout(ctx, "overview", title, html`<h1>${title}</h1><p class="error">${message}</p>`)
