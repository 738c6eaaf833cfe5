/**
 * The admin page's view of the flow limits (`FlowControl`): each limited topic, what is in
 * flight, its limits and its groups' settings, with Set and Clear (and a form for a new one).
 * Same rules as views.ts: every value escaped.
 */
import type * as FlowControl from "@effect-durable/pg/FlowControl"
import { html } from "./html.js"
import { layout, num, time, type ViewContext } from "./views.js"

const orNone = (n: number | null) => (n === null ? "" : String(n))

/** The inputs and button that set a topic's limits (a row's, or the new-limit form's). */
const setter = (topic: string | null, limit?: FlowControl.TopicLimit) =>
  html`${
    topic === null ? html`<input name="topic" placeholder="topic" maxlength="128" required> ` : ""
  }<input name="max" type="number" min="1" max="1000000" placeholder="max" value="${
    orNone(limit?.maxInFlight ?? null)
  }"> <input name="group-max" type="number" min="1" max="1000000" placeholder="per group" value="${
    orNone(limit?.groupMaxInFlight ?? null)
  }"> <button data-action="limit-set"${topic === null ? "" : html` data-topic="${topic}"`}>Set</button>`

export const limitsPage = (ctx: ViewContext, limits: ReadonlyArray<FlowControl.TopicLimit>) =>
  layout(
    ctx,
    "limits",
    "Limits",
    html`<h1>Limits</h1>
<p class="note">Global concurrency limits, held by every claim across every projector: at most Max of a topic's messages in flight, at most Per group of one group's. A change applies at the next claim; deliveries under way finish.</p>
${
      limits.length === 0
        ? html`<p class="note">No limits.</p>`
        : html`<table id="limits"><thead><tr><th>Topic</th><th class="num">In flight</th><th class="num">Max</th><th class="num">Per group</th><th>Groups</th><th>Set by</th>${
          ctx.readOnly ? "" : html`<th></th>`
        }</tr></thead><tbody>${
          limits.map((l) =>
            html`<tr data-topic="${l.topic}"><td>${l.topic}</td>${num(l.inFlight)}<td class="num max">${
              orNone(l.maxInFlight) || "-"
            }</td><td class="num group-max">${orNone(l.groupMaxInFlight) || "-"}</td><td>${
              l.groups.length === 0
                ? "-"
                : l.groups.map((g, i) =>
                  html`${i > 0 ? "; " : ""}${g.group}: ${g.maxInFlight ?? "per group"}, weight ${g.weight}`
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
    }${ctx.readOnly ? "" : html`<h2>New limit</h2><p class="limit-new">${setter(null)}</p>`}`
  )
