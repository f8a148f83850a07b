// The client's page (/web/app): a quote, a lease opened with its escrow shown before signing, a job
// signed by the wallet, the lease followed live (server-sent events: placement, settlements, escrow
// and time left, with a top-up offered before it runs dry), its status and logs by signed request,
// and its close with the refund.
import { type Address, address } from "@solana/kit";

import { closeLease, type LeaseFacts, openLease, topUp } from "./actions";
import { attachJob, signedGet } from "./requests";
import { act, type Session, start, walletState } from "./session";
import { run } from "./signing";
import { $, clear, el, formatIo, guard, input, parseIo, parseWhole, say } from "./ui";

let session: Session;
let followed: Address | null = null; // the lease the page shows
let lease: LeaseFacts | null = null; // its facts, once its first state has arrived
let live: EventSource | null = null;
let jobNumber = 1;

function leaseForm() {
  return {
    gpuModel: parseWhole(input("gpu_model"), "GPU model", 0n, 65535n),
    minVramGb: parseWhole(input("min_vram_gb"), "Least GiB per GPU", 0n, 65535n),
    gpuCount: parseWhole(input("gpu_count"), "GPUs", 1n, 255n),
    region: parseWhole(input("region"), "Region", 0n, 65535n),
    maxPricePerGpuHour: parseIo(input("max_price"), "Max price per GPU-hour"),
    durationSeconds: parseWhole(input("duration_minutes"), "Duration (minutes)", 1n, 527040n) * 60n,
  };
}

async function quote(): Promise<void> {
  const f = leaseForm();
  const query = new URLSearchParams({
    gpu_count: f.gpuCount.toString(),
    gpu_model: f.gpuModel.toString(),
    min_vram_gb: f.minVramGb.toString(),
    region: f.region.toString(),
    max_price_per_gpu_hour: f.maxPricePerGpuHour.toString(),
    duration_seconds: f.durationSeconds.toString(),
  });
  const response = await fetch(`/quote?${query}`);
  const answer = await response.json();
  if (!response.ok) throw new Error(String(answer.error ?? response.status));
  const out = $("#quote");
  out.hidden = false;
  $("#quote-placeable").textContent = answer.placeable ? "yes, on " + answer.shares.length + " node(s)" : `no: ${answer.reason}`;
  $("#quote-burn").textContent = answer.placeable ? `${formatIo(BigInt(answer.burn_per_hour))} per hour` : "-";
  $("#quote-escrow").textContent = formatIo(BigInt(answer.escrow.needed));
}

function follow(address_: Address): void {
  live?.close();
  followed = address_;
  lease = null;
  $("#lease").hidden = false;
  $("#lease-address").textContent = address_;
  live = new EventSource(`/web/api/leases/${address_}/events`);
  live.onmessage = (event) => show(JSON.parse(event.data));
}

function show(state: Record<string, any>): void {
  if (state.error) return say(state.error, "error");
  if (state.lease !== followed) return; // a stream of a lease no longer shown
  if (lease === null || $("#lease-status").textContent !== state.status) {
    (window as any).gpunetRefresh().catch(() => undefined); // the lease list and balances follow its status
  }
  lease = {
    lease: address(state.lease),
    gpuCount: BigInt(state.gpu_count),
    maxPricePerGpuHour: BigInt(state.max_price_per_gpu_hour),
    nodes: state.nodes.map((n: string) => address(n)),
  };
  $("#lease-status").textContent = state.status;
  $("#lease-deposited").textContent = formatIo(BigInt(state.deposited));
  $("#lease-paid").textContent = formatIo(BigInt(state.paid));
  $("#lease-escrow").textContent = state.escrow_left === null ? "-" : formatIo(BigInt(state.escrow_left));
  $("#lease-left").textContent = state.seconds_left === null ? "-" : `${Math.floor(state.seconds_left / 60)} min ${state.seconds_left % 60} s`;
  const nodes = $("#lease-nodes");
  clear(nodes);
  for (const node of state.nodes as string[]) {
    const item = el("li");
    item.append(el("a", node, { href: `/web/nodes/${node}` }));
    nodes.append(item);
  }
  $("#topup-warning").hidden = !state.warn_top_up;
  const rows = $("#settlements tbody");
  clear(rows);
  for (const s of state.settlements as Record<string, string>[]) {
    const row = el("tr");
    const tx = el("td");
    tx.append(el("a", s.signature!.slice(0, 12) + "…", { href: `/web/tx/${s.signature}` }));
    row.append(tx, el("td", s.gpu_seconds!, { class: "num" }), el("td", formatIo(BigInt(s.amount!)), { class: "num" }));
    rows.append(row);
  }
  $("#settlement-count").textContent = String(state.settlements.length);
}

async function refreshLeases(s: Session): Promise<void> {
  const list = $("#leases");
  clear(list);
  for (const l of s.state!.leases as Record<string, string>[]) {
    const item = el("li");
    const button = el("button", `${l.lease} (${l.status})`, { type: "button", class: "secondary" });
    button.onclick = () => follow(address(l.lease!));
    item.append(button);
    list.append(item);
  }
}

function shown(): Address {
  if (!followed) throw new Error("Choose a lease first");
  return followed;
}

function facts(): LeaseFacts {
  if (!lease) throw new Error("The lease's state has not arrived yet: try again in a moment");
  return lease;
}

async function main(): Promise<void> {
  session = await start(refreshLeases);
  $("#quote-button").onclick = guard(quote);
  $("#open-button").onclick = guard(async () => {
    const plan = await openLease(session.context(), { leaseId: BigInt(Date.now()), ...leaseForm() });
    if (await run(session.idl, session.connected!, session.program, plan)) {
      await (window as any).gpunetRefresh();
      follow(plan.expected.instructions[0]!.accounts.lease!);
    }
  });
  $("#job-button").onclick = guard(async () => {
    const command = input("command").trim().split(/\s+/).filter(Boolean);
    if (!command.length) throw new Error("Command: the job's program and its arguments");
    await attachJob(session.connected!, shown(), command, jobNumber);
    say(`Job ${jobNumber} attached to lease ${shown()}: signed by your wallet.`, "ok");
    jobNumber += 1;
  });
  $("#status-button").onclick = guard(async () => {
    const view = await signedGet(session.connected!, `/leases/${shown()}/job?tail=20`);
    const nodes = (view.nodes as Record<string, string>[]).map((n) => `${n.node_key}: ${n.state}`);
    $("#job-status").textContent = nodes.join("\n") || "no node has reported yet";
    $("#job-logs").textContent = (view.logs as Record<string, string>[]).map((l) => l.line).join("\n");
    jobNumber = Number(view.job_number ?? 0) + 1; // the next job's number, as the coordinator counts them
  });
  $("#topup-button").onclick = guard(async () => {
    const extra = parseWhole(input("extra_minutes"), "Extra minutes", 1n, 527040n) * 60n;
    const plan = await topUp(session.context(), facts(), extra);
    await act(session, plan);
  });
  $("#close-button").onclick = guard(async () => {
    const before = BigInt((await walletState(session.connected!.account.address)).io);
    const plan = await closeLease(session.context(), facts());
    if (await run(session.idl, session.connected!, session.program, plan)) {
      const after = BigInt((await walletState(session.connected!.account.address)).io);
      $("#refund").textContent = `Refunded ${formatIo(after - before)} to your IO account.`;
      $("#refund").dataset.units = (after - before).toString();
      await (window as any).gpunetRefresh();
    }
  });
}

main().catch((e) => say((e as Error).message, "error"));
