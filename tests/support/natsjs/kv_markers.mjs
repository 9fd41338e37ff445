// nats.js v3's KV with limit markers against the server at argv[2]: a bucket with a max age of 1 s and
// markers of 2 s, a watcher's updates for one put, and the bucket's status; printed as one JSON line.
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";

const nc = await connect({ servers: process.argv[2] });
const out = {};
try {
  const kvm = new Kvm(nc);
  const kv = await kvm.create("JSM", { ttl: 1000, markerTTL: 2000 });
  const st = await kv.status();
  out.status = { ttl: st.ttl, markerTTL: st.markerTTL };
  const iter = await kv.watch();
  await kv.put("k", "v");
  out.updates = [];
  for await (const e of iter) {
    out.updates.push({ key: e.key, op: e.operation, rev: e.revision, value: e.string() });
    if (out.updates.length === 2) break;
  }
  const e = await kv.get("k");
  out.get = e === null ? null : { op: e.operation, rev: e.revision };
} catch (err) {
  out.error = String(err);
}
console.log(JSON.stringify(out));
await nc.close();
