/**
 * A detached shell that outlives nothing: it watches this process and, once it is gone for
 * any reason (normal exit, SIGTERM, SIGKILL), stops the server it guards and deletes the
 * server's directory. Normal release does the same at once and dismisses the guardian.
 */
import { type ChildProcess, spawn } from "node:child_process"

const SCRIPT = `
parent=$1; dir=$2; target=$3
while kill -0 "$parent" 2>/dev/null; do sleep 0.2; done
if [ "$target" = postmaster ]; then
  target=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
  signal=QUIT
else
  signal=TERM
fi
if [ -n "$target" ]; then
  kill -$signal "$target" 2>/dev/null
  i=0
  while kill -0 "$target" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$target" 2>/dev/null
fi
rm -rf "$dir"
`

/**
 * Guards `dir` and the server process `target`: a pid, or "postmaster" for the PostgreSQL
 * whose pid is in `dir/data/postmaster.pid` (read when needed, so a restart is followed).
 */
export const spawnGuardian = (dir: string, target: number | "postmaster"): ChildProcess => {
  const guardian = spawn("sh", ["-c", SCRIPT, "guardian", String(process.pid), dir, String(target)], {
    detached: true,
    stdio: "ignore"
  })
  guardian.unref()
  return guardian
}
