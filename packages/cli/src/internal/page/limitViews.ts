/**
 * The admin page's view of the flow limits (`FlowControl`): each limited topic, what is in
 * flight, its limits and its groups' settings, with Set and Clear (and a form for a new one);
 * then each limited stored-inbox consumer alike. Same rules as views.ts: every value escaped.
 */
import type * as FlowControl from "@effect-durable/pg/FlowControl"
import { formatPeriod } from "../durations.js"
import { html } from "./html.js"
import { layout, num, time, type ViewContext } from "./views.js"

const orNone = (n: number | null) => (n === null ? "" : String(n))
const rateText = (
  rate: FlowControl.RateLimit | null
) => (rate === null ? "" : `${rate.limit}/${formatPeriod(rate.perMillis)}`)
const rateCell = (
  rate: FlowControl.RateLimit | null
) => (rate === null ? "-" : `${rateText(rate)} (burst ${rate.burst})`)

/** The inputs and button that set a topic's limits (a row's, or the new-limit form's). */
const setter = (topic: string | null, limit?: FlowControl.TopicLimit) =>
  html`${
    topic === null ? html`<input name="topic" placeholder="topic" maxlength="128" required> ` : ""
  }<input name="max" type="number" min="1" max="1000000" placeholder="max" value="${
    orNone(limit?.maxInFlight ?? null)
  }"> <input name="group-max" type="number" min="1" max="1000000" placeholder="per group" value="${
    orNone(limit?.groupMaxInFlight ?? null)
  }"> <input name="rate" size="7" maxlength="32" placeholder="rate 10/1m" value="${
    rateText(limit?.rate ?? null)
  }"> <input name="burst" type="number" min="1" max="1000000" placeholder="burst" value="${
    orNone(limit?.rate?.burst ?? null)
  }"> <input name="group-rate" size="7" maxlength="32" placeholder="group rate" value="${
    rateText(limit?.groupRate ?? null)
  }"> <input name="group-burst" type="number" min="1" max="1000000" placeholder="group burst" value="${
    orNone(limit?.groupRate?.burst ?? null)
  }"> <button data-action="limit-set"${topic === null ? "" : html` data-topic="${topic}"`}>Set</button>`

/** The inputs and button that set a stored-inbox consumer's limits (a row's, or the new-limit form's). */
const inboxSetter = (consumer: string | null, limit?: FlowControl.InboxLimit) =>
  html`${
    consumer === null ? html`<input name="consumer" placeholder="consumer" maxlength="128" required> ` : ""
  }<input name="max" type="number" min="1" max="1000000" placeholder="max" value="${
    orNone(limit?.maxInFlight ?? null)
  }"> <input name="rate" size="7" maxlength="32" placeholder="rate 10/1m" value="${
    rateText(limit?.rate ?? null)
  }"> <input name="burst" type="number" min="1" max="1000000" placeholder="burst" value="${
    orNone(limit?.rate?.burst ?? null)
  }"> <button data-action="inbox-limit-set"${consumer === null ? "" : html` data-consumer="${consumer}"`}>Set</button>`

const inboxSection = (ctx: ViewContext, limits: ReadonlyArray<FlowControl.InboxLimit>) =>
  html`<h2>Stored inbox</h2>
<p class="note">Per consumer of the stored inbox (InboxWorker): at most Max of its entries in flight across every worker, at most Rate claimed per period.</p>
${
    limits.length === 0
      ? html`<p class="note">No inbox limits.</p>`
      : html`<table id="inbox-limits"><thead><tr><th>Consumer</th><th class="num">In flight</th><th class="num">Max</th><th>Rate</th><th class="num">Tokens</th><th>Set by</th>${
        ctx.readOnly ? "" : html`<th></th>`
      }</tr></thead><tbody>${
        limits.map((l) =>
          html`<tr data-consumer="${l.consumer}"><td>${l.consumer}</td>${num(l.inFlight)}<td class="num max">${
            orNone(l.maxInFlight) || "-"
          }</td><td class="rate">${rateCell(l.rate)}</td><td class="num tokens">${
            l.tokens === null ? "-" : Math.floor(l.tokens)
          }</td><td>${l.updatedBy}, ${time(l.updatedAt)}</td>${
            ctx.readOnly
              ? ""
              : html`<td class="actions">${
                inboxSetter(l.consumer, l)
              } <button data-action="inbox-limit-clear" data-consumer="${l.consumer}">Clear</button></td>`
          }</tr>`
        )
      }</tbody></table>`
  }${
    ctx.readOnly ? "" : html`<h3>New inbox limit</h3><p class="limit-new" id="new-inbox-limit">${inboxSetter(null)}</p>`
  }`

export const limitsPage = (
  ctx: ViewContext,
  limits: ReadonlyArray<FlowControl.TopicLimit>,
  inbox: ReadonlyArray<FlowControl.InboxLimit>
) =>
  layout(
    ctx,
    "limits",
    "Limits",
    html`<h1>Limits</h1>
<p class="note">Global concurrency limits and rates, held by every claim across every projector: at most Max of a topic's messages in flight, at most Per group of one group's; at most Rate claimed per period (a token bucket: Burst at once after a quiet spell, Tokens left now), per topic and per group. A change applies at the next claim; deliveries under way finish.</p>
${
      limits.length === 0
        ? html`<p class="note">No limits.</p>`
        : html`<table id="limits"><thead><tr><th>Topic</th><th class="num">In flight</th><th class="num">Max</th><th class="num">Per group</th><th>Rate</th><th class="num">Tokens</th><th>Group rate</th><th>Groups</th><th>Set by</th>${
          ctx.readOnly ? "" : html`<th></th>`
        }</tr></thead><tbody>${
          limits.map((l) =>
            html`<tr data-topic="${l.topic}"><td>${l.topic}</td>${num(l.inFlight)}<td class="num max">${
              orNone(l.maxInFlight) || "-"
            }</td><td class="num group-max">${orNone(l.groupMaxInFlight) || "-"}</td><td class="rate">${
              rateCell(l.rate)
            }</td><td class="num tokens">${l.tokens === null ? "-" : Math.floor(l.tokens)}</td><td class="group-rate">${
              rateCell(l.groupRate)
            }</td><td>${
              l.groups.length === 0
                ? "-"
                : l.groups.map((g, i) =>
                  html`${i > 0 ? "; " : ""}${g.group}: ${g.maxInFlight ?? "per group"}, weight ${g.weight}${
                    g.rate === null ? "" : `, rate ${rateCell(g.rate)}`
                  }`
                )
            }</td><td>${l.updatedBy}, ${time(l.updatedAt)}</td>${
              ctx.readOnly
                ? ""
                : html`<td class="actions">${
                  setter(l.topic, l)
                } <button data-action="limit-clear" data-topic="${l.topic}">Clear</button></td>`
            }</tr>`
          )
        }</tbody></table>`
    }${ctx.readOnly ? "" : html`<h2>New limit</h2><p class="limit-new" id="new-limit">${setter(null)}</p>`}${
      inboxSection(ctx, inbox)
    }`
  )
