// Parses a Chrome trace written by smolcluster with Chrome DevTools' own trace engine (the
// vendored subset in tests/vendor/trace_engine) and checks that
//   1. every complete ("X") slice parses: the engine's treify puts each one in its thread's tree
//      (it leaves out a slice that overlaps another);
//   2. every flow event sits on a slice (same ts, pid, tid and category, DevTools' binding rule);
//      a "p2p" flow joins one send and its receive (each naming the other's rank as peer), a
//      "collective" flow the members of one collective (one per traced rank); and the engine's
//      FlowsHandler binds every flow to exactly those slices (one per distinct start time: it keys
//      a flow's events by timestamp, so slices starting together count once);
//   3. the classic trace viewer (catapult) would bind every flow event to the same slice: its
//      lookup takes the slices of the event's thread that contain ts over closed intervals and
//      prefers the earlier one (catapult tracing/base/sorted_array_utils.html,
//      findIndexInSortedClosedIntervals), so exactly one slice must contain the event's ts.
// Usage: node check_trace.mjs TRACE.json[.gz]. Prints "N passed, M failed" and exits 1 on a failure.
import fs from 'node:fs';
import zlib from 'node:zlib';

import * as Flows from '../vendor/trace_engine/models/trace/handlers/FlowsHandler.js';
import * as TraceHelpers from '../vendor/trace_engine/models/trace/helpers/Trace.js';
import * as TreeHelpers from '../vendor/trace_engine/models/trace/helpers/TreeHelpers.js';
import * as Types from '../vendor/trace_engine/models/trace/types/types.js';

const file = process.argv[2];
const bytes = fs.readFileSync(file);
const text = (bytes[0] === 0x1f && bytes[1] === 0x8b ? zlib.gunzipSync(bytes) : bytes).toString('utf8');
const trace = JSON.parse(text);
const events = trace.traceEvents;

let passed = 0, failed = 0;
const failures = [];
function check(ok, what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    if (failures.length < 20) failures.push(what);
  }
}

// 1. Slices, per thread, through the engine's tree builder.
const threads = new Map();
let slices = 0;
for (const e of events) {
  if (!Types.Events.isComplete(e)) continue;
  ++slices;
  const key = `${e.pid}:${e.tid}`;
  if (!threads.has(key)) threads.set(key, []);
  threads.get(key).push(e);
}
for (const [key, list] of threads) {
  TraceHelpers.sortTraceEventsInPlace(list);
  const {entryToNode} = TreeHelpers.treify(list);
  const dropped = list.filter(e => !entryToNode.has(e));
  check(dropped.length === 0, `thread ${key}: ${dropped.length} slices left out of the tree, first ${JSON.stringify(dropped[0])}`);
}
check(slices > 0, 'the trace has slices');

// 2. Flows through the engine's handler, in file order as the Performance panel feeds it. Our
// side: each flow's events and the slices they sit on (same ts, pid, tid and category).
const sliceAt = new Map();
for (const e of events)
  if (e.ph === 'X') {
    const key = `${e.ts}|${e.pid}|${e.tid}|${e.cat}`;
    if (!sliceAt.has(key)) sliceAt.set(key, e);
  }
const ours = new Map();   // flow id → its slices
for (const e of events) {
  if (e.ph !== 's' && e.ph !== 't' && e.ph !== 'f') continue;
  const slice = sliceAt.get(`${e.ts}|${e.pid}|${e.tid}|${e.cat}`);
  check(slice !== undefined, `flow event ${JSON.stringify(e)} has no slice with its ts, pid, tid and category`);
  if (!ours.has(e.id)) ours.set(e.id, []);
  if (slice) ours.get(e.id).push(slice);
}
const flowOf = new Map();  // op → flow id
for (const [id, list] of ours) for (const x of list) flowOf.set(x.args.op, id);
// What each flow joins: one send and its receive, or the members of one collective on the traced ranks.
const membersOf = new Map();
for (const e of events)
  if (e.ph === 'X' && e.args && e.args.kind === 'collective') {
    if (!membersOf.has(e.args.collective)) membersOf.set(e.args.collective, 0);
    membersOf.set(e.args.collective, membersOf.get(e.args.collective) + 1);
  }
for (const [id, list] of ours) {
  const kinds = new Set(list.map(x => x.args.kind));
  if (kinds.has('collective')) {
    const c = list[0].args.collective;
    check(kinds.size === 1 && list.every(x => x.args.collective === c), `flow ${id} mixes collectives`);
    check(list.length === membersOf.get(c), `flow ${id}: ${list.length} of the ${membersOf.get(c)} members of collective ${c}`);
    check(new Set(list.map(x => x.pid)).size === list.length, `flow ${id}: two members on one rank`);
  } else {
    const send = list.find(x => x.args.kind === 'send'), recv = list.find(x => x.args.kind === 'recv');
    check(list.length === 2 && send && recv, `flow ${id} is not one send and one receive`);
    if (send && recv) check(send.args.peer === recv.pid && recv.args.peer === send.pid, `flow ${id}: peers differ`);
  }
}
// DevTools keys a flow's events by timestamp, so it binds one slice per distinct start time and
// drops a flow whose slices all start together.
Flows.reset();
for (const e of events) Flows.handleEvent(e);
await Flows.finalize();
const bound = Flows.data().flows;
let representable = 0;
const distinct = new Map();
for (const [id, list] of ours) {
  distinct.set(id, new Set(list.map(x => x.ts)).size);
  if (distinct.get(id) >= 2) ++representable;
}
check(bound.length === representable, `DevTools bound ${bound.length} flows, ${representable} have slices at two or more times`);
for (const flow of bound) {
  const what = JSON.stringify(flow.map(e => e.args && e.args.op));
  check(flow.every(e => e.ph === 'X'), `DevTools flow ${what} binds to something that is not a slice`);
  const id = flowOf.get(flow[0].args && flow[0].args.op);
  check(id !== undefined && flow.every(e => flowOf.get(e.args.op) === id), `DevTools flow ${what} joins slices of different flows`);
  if (id !== undefined) check(flow.length === distinct.get(id), `DevTools flow ${what}: ${flow.length} slices of flow ${id}`);
}

// 3. The classic viewer's lookup: exactly one slice of the thread contains each flow event.
const starts = new Map();
for (const [key, list] of threads) starts.set(key, list.map(e => [e.ts, e.ts + e.dur]));
for (const e of events) {
  if (e.ph !== 's' && e.ph !== 't' && e.ph !== 'f') continue;
  const list = starts.get(`${e.pid}:${e.tid}`) || [];
  const containing = list.filter(([lo, hi]) => lo <= e.ts && e.ts <= hi).length;
  check(containing === 1, `flow event ${JSON.stringify(e)} lies in ${containing} slices of its thread`);
}

for (const f of failures) console.log('FAIL ' + f);
console.log(`${file}: ${slices} slices, ${ours.size} flows, ${bound.length} bound by DevTools (the others start together)`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
