/**
 * The admin page's view of workflow executions (`@effect-durable/workflow`): the latest ones,
 * filtered by workflow and status, and one execution with its journal, with Interrupt and
 * Resume. Same rules as views.ts: every value escaped; payloads, results and journal values
 * only when the page shows payloads (a step's outcome, success or failure, always).
 */
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import type * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import { html, raw } from "./html.js"
import { badge, layout, link, num, time, type ViewContext } from "./views.js"

export interface ExecutionsData {
  readonly workflow: string | undefined
  /** The attribute filter as typed, `NAME=VALUE`. */
  readonly attribute: string | undefined
  readonly status: WorkflowAdmin.Status | undefined
  readonly executions: ReadonlyArray<WorkflowAdmin.ExecutionSummary> | undefined
  /** Suspended executions counted by what they wait on (undefined: the query failed). */
  readonly waiting: ReadonlyArray<WorkflowAdmin.WaitCount> | undefined
  /** Unfinished executions by deploy version, the diverged and stranded among them (undefined: the query failed). */
  readonly versions: ReadonlyArray<WorkflowDeploys.VersionCount> | undefined
  readonly error: string | undefined
}

/** How many executions the list shows. */
export const LIST_LIMIT = 100

/** The execution's page, below the page's base. */
export const executionPath = (workflow: string, executionId: string) =>
  `/workflows/${encodeURIComponent(workflow)}/${encodeURIComponent(executionId)}`

const statusBadge = (e: WorkflowAdmin.ExecutionSummary) =>
  html`${badge(e.status)}${e.interruptRequested && e.status !== "complete" ? html` ${badge("interrupting")}` : ""}`

const filterForm = (ctx: ViewContext, data: ExecutionsData) =>
  html`<form class="filter" method="get" action="${ctx.base}/workflows">
<label>Workflow<input name="workflow" value="${data.workflow ?? ""}" placeholder="any" list="workflow-names"></label>
<datalist id="workflow-names">${
    // The workflow names of the executions listed (the database's own, not an example's).
    [...new Set((data.executions ?? []).map((e) => e.workflow))].sort().map((name) =>
      html`<option value="${name}"></option>`
    )}</datalist>
<label>Attribute<input name="attribute" value="${data.attribute ?? ""}" placeholder="name=value"></label>
<label>Status<select name="status">${
    ["", ...WorkflowAdmin.Statuses].map((s) =>
      html`<option value="${s}"${raw(data.status === s ? " selected" : "")}>${s === "" ? "any" : s}</option>`
    )
  }</select></label>
<button type="submit">Show</button></form>`

/** A long id in its short form, the whole id in its title (shown on hover, kept by a copy of the cell). */
const shortLabel = (executionId: string) =>
  html`<code class="id" title="${executionId}">${WorkflowAdmin.shortId(executionId)}</code>`

export const executionsPage = (ctx: ViewContext, data: ExecutionsData) => {
  const list = data.error !== undefined
    ? html`<p class="error">${data.error}</p>`
    : data.executions === undefined || data.executions.length === 0
    ? html`<p class="note">No workflow executions${data.workflow === undefined ? "" : ` of ${data.workflow}`}${
      data.status === undefined ? "" : ` that are ${data.status}`
    }.</p>`
    : html`<table id="executions"><thead><tr><th>Workflow</th><th>Execution</th><th>Status</th><th>Waiting on</th><th>Attributes</th><th class="num">Runs</th><th>Parent</th><th>Started</th><th>Changed</th><th>Completed</th></tr></thead><tbody>${
      data.executions.map((e) =>
        html`<tr data-execution="${e.executionId}"><td>${e.workflow}</td><td>${
          link(ctx, executionPath(e.workflow, e.executionId), "", shortLabel(e.executionId))
        }</td><td class="state">${statusBadge(e)}</td><td class="waits">${
          e.waitingOn === null ? "-" : e.waitingOn.map(WorkflowAdmin.describeWait).join(", ")
        }</td><td class="attributes">${attributesText(e.attributes)}</td>${num(e.runs)}<td>${
          e.parent === null
            ? "-"
            : link(ctx, executionPath(e.parent.workflow, e.parent.executionId), "", shortLabel(e.parent.executionId))
        }</td><td>${time(e.createdAt)}</td><td>${time(e.updatedAt)}</td><td>${time(e.completedAt)}</td></tr>`
      )
    }</tbody></table>${
      data.executions.length === LIST_LIMIT
        ? html`<p class="note">The ${LIST_LIMIT} most recently changed; filter to see others.</p>`
        : ""
    }`
  return layout(
    ctx,
    "workflows",
    "Workflows",
    html`<h1>Workflows</h1>
<p class="note">Executions of <code>@effect-durable/workflow</code>, most recently changed first. A run that keeps failing is a dead letter of its <code>workflow.run:&lt;name&gt;</code> topic.</p>
${filterForm(ctx, data)}
${waitingTable(data)}
${versionsTable(data)}
${list}`
  )
}

/** Searchable attributes as `name=value, ...` (escaped where shown). */
const attributesText = (attributes: Readonly<Record<string, string>>) =>
  Object.keys(attributes).length === 0
    ? "-"
    : Object.entries(attributes).map(([name, value]) => `${name}=${value}`).join(", ")

/** Suspended executions by what they wait on: where a stuck fleet shows first. */
const waitingTable = (data: ExecutionsData) =>
  data.waiting === undefined || data.waiting.length === 0
    ? ""
    : html`<h2>Waiting, by what they wait on</h2>
<table id="waiting"><thead><tr><th>Workflow</th><th>Waiting on</th><th class="num">Executions</th><th>Since</th></tr></thead><tbody>${
      data.waiting.map((c) =>
        html`<tr><td>${c.workflow}</td><td>${c.kind}${c.name === "" ? "" : ` ${c.name}`}</td>${num(c.executions)}<td>${
          time(c.since)
        }</td></tr>`
      )
    }</tbody></table>`

/** Unfinished executions by the deploy version they run on: what a rolling deploy leaves behind. */
const versionsTable = (data: ExecutionsData) =>
  data.versions === undefined || data.versions.length === 0
    ? ""
    : html`<h2>Unfinished, by deploy version</h2>
<table id="versions"><thead><tr><th>Workflow</th><th>Version</th><th class="num">Unfinished</th><th class="num">Diverged</th><th class="num">Stranded</th><th>Oldest started</th></tr></thead><tbody>${
      data.versions.map((v) =>
        html`<tr><td>${v.workflow}</td><td>${v.version ?? "-"}</td>${num(v.unfinished)}${num(v.diverged)}${
          num(v.stranded)
        }<td>${time(v.oldestStartedAt)}</td></tr>`
      )
    }</tbody></table>`

/** What the execution waits on: a child links to its page, a clock says when it is due. */
const waitsField = (ctx: ViewContext, waits: WorkflowAdmin.ExecutionDetail["waits"]) =>
  waits === null || waits.length === 0 ?
    "-" :
    html`<ul class="waits">${
      waits.map((wait) =>
        html`<li>${
          wait.kind === "child"
            ? html`child ${
              link(
                ctx,
                executionPath(wait.workflow, wait.executionId),
                "",
                `${wait.workflow} ${wait.executionId}`
              )
            } (${wait.status ?? "gone"})`
            : wait.kind === "clock"
            ? html`clock ${wait.name}, due ${wait.dueAt === null ? "-" : time(wait.dueAt)}`
            : WorkflowAdmin.describeWait(wait)
        }</li>`
      )
    }</ul>`

/** A journal value's outcome, from the exit the engine recorded. */
const outcome = (step: WorkflowAdmin.ExecutionDetail["steps"][number]): string => {
  const recorded = step.result as { readonly _tag?: string; readonly exit?: { readonly _tag?: string } } | null
  const exit = step.kind === "activity" ? recorded?.exit : recorded
  return recorded === null
    ? "running"
    : exit?._tag === "Success"
    ? "success"
    : exit?._tag === "Failure"
    ? "failure"
    : "-"
}

const json = (value: unknown) => html`<pre>${JSON.stringify(value, null, 2)}</pre>`

const executionActions = (ctx: ViewContext, e: WorkflowAdmin.ExecutionSummary) =>
  ctx.readOnly || e.status === "complete"
    ? ""
    : html`<div class="actions">${
      e.status === "suspended"
        ? html`<button data-action="workflow-resume" data-workflow="${e.workflow}" data-execution="${e.executionId}">Resume</button> `
        : ""
    }${
      e.interruptRequested
        ? ""
        : html`<button class="danger" data-action="workflow-interrupt" data-workflow="${e.workflow}" data-execution="${e.executionId}">Interrupt</button>`
    }</div>`

export const executionPage = (ctx: ViewContext, e: WorkflowAdmin.ExecutionDetail) =>
  layout(
    ctx,
    "workflows",
    `${e.workflow} ${e.executionId}`,
    html`<h1>${e.workflow} <code>${e.executionId}</code> ${statusBadge(e)}</h1>
${executionActions(ctx, e)}
<dl class="fields">
<dt>Waiting on</dt><dd>${waitsField(ctx, e.waits)}</dd>
<dt>Attributes</dt><dd>${attributesText(e.attributes)}</dd>
<dt>Group</dt><dd>${e.group ?? "-"}</dd>
<dt>Version</dt><dd>${e.version ?? "-"}</dd>
<dt>Runs</dt><dd>${e.runs}</dd>
<dt>Parent</dt><dd>${
      e.parent === null
        ? "-"
        : link(
          ctx,
          executionPath(e.parent.workflow, e.parent.executionId),
          "",
          `${e.parent.workflow} ${e.parent.executionId}`
        )
    }</dd>
<dt>Started</dt><dd>${time(e.createdAt)}</dd>
<dt>Changed</dt><dd>${time(e.updatedAt)}</dd>
<dt>Completed</dt><dd>${time(e.completedAt)}</dd>
<dt>Interrupt</dt><dd>${e.interruptRequested ? "requested" : "-"}</dd>
<dt>Payload mismatches</dt><dd>${
      e.payloadMismatches === 0
        ? "0"
        : html`${e.payloadMismatches} (started again with another payload; the first one stands)`
    }</dd>
<dt>Payload</dt><dd>${ctx.showPayloads ? json(e.payload) : "hidden (payloads are not shown on this page)"}</dd>
<dt>Last result</dt><dd>${ctx.showPayloads ? json(e.result) : "hidden"}</dd>
</dl>
<h2>Journal</h2>
${
      e.steps.length === 0
        ? html`<p class="note">No step recorded yet.</p>`
        : html`<table id="journal"><thead><tr><th>Kind</th><th>Name</th><th class="num">Attempt</th><th>Outcome</th><th>Recorded</th>${
          ctx.showPayloads ? html`<th>Value</th>` : ""
        }</tr></thead><tbody>${
          e.steps.map((s) =>
            html`<tr><td>${s.kind}</td><td>${s.name}</td>${num(s.attempt)}<td>${outcome(s)}</td><td>${
              time(s.recordedAt)
            }</td>${ctx.showPayloads ? html`<td>${json(s.result)}</td>` : ""}</tr>`
          )
        }</tbody></table>`
    }`
  )
