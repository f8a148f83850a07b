// What the wallet signs besides transactions, with solana:signMessage: a lease's job (the bytes of
// gpunet.protocol.job_message) and the client's requests for its lease's status and logs (the bytes
// of gpunet.protocol.request_message, sent as sign_request's headers). The page checks the job bytes
// the coordinator prepares against its form before the wallet signs them, and every signature the
// wallet returns before sending it.
import { type Address, getAddressEncoder, getBase58Decoder, getPublicKeyFromAddress, type SignatureBytes, verifySignature } from "@solana/kit";
import { SolanaSignMessage, type SolanaSignMessageFeature } from "@solana/wallet-standard-features";

import type { Connected } from "./signing";
import { postJson } from "./signing";

const JOB_TAG = "gpunet-job-v1\0";
const REQUEST_TAG = "gpunet-request-v1\0";
const text = new TextEncoder();

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function hex(bytes: ArrayBuffer | Uint8Array): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

function fromHex(value: string): Uint8Array {
  return new Uint8Array((value.match(/../g) ?? []).map((h) => parseInt(h, 16)));
}

// The wallet's signature over `message`, checked to be the connected account's over exactly it.
export async function signMessage(c: Connected, message: Uint8Array): Promise<string> {
  const feature = c.wallet.features[SolanaSignMessage] as SolanaSignMessageFeature[typeof SolanaSignMessage];
  const [out] = await feature.signMessage({ account: c.account, message });
  if (!out) throw new Error("the wallet returned no signature");
  if (out.signedMessage && hex(out.signedMessage) !== hex(message)) {
    throw new Error("the wallet signed another message than the one asked: nothing was sent");
  }
  const key = await getPublicKeyFromAddress(c.account.address as Address);
  if (!(await verifySignature(key, out.signature as SignatureBytes, message))) {
    throw new Error(`the wallet's signature is not ${c.account.address}'s over the message: nothing was sent`);
  }
  return getBase58Decoder().decode(out.signature);
}

// The job a form describes, as the coordinator's JobSpec stores it with every other field at its default.
function jobOf(command: string[]): Record<string, unknown> {
  return {
    command,
    image: null,
    env: {},
    inputs: [],
    checkpoint_dir: "checkpoints",
    restart_policy: "on-failure",
    max_restarts: 3,
    time_limit_seconds: null,
  };
}

function sameJson(a: unknown, b: unknown): boolean {
  const canonical = (v: unknown): unknown =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical((v as Record<string, unknown>)[k])]))
      : Array.isArray(v)
        ? v.map(canonical)
        : v;
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

// Gives the lease its job `number`: the coordinator prepares the exact bytes; the page checks them
// (tag, lease, the job of its form, the number) and the wallet signs them.
export async function attachJob(c: Connected, lease: Address, command: string[], number: number): Promise<void> {
  const job = jobOf(command);
  const prepared = await postJson("/web/api/job", { lease, job: { command }, gpus_per_node: null, job_number: number });
  const message = fromHex(String(prepared.message_hex));
  const head = concat(text.encode(JOB_TAG), new Uint8Array(getAddressEncoder().encode(lease)));
  if (hex(message.subarray(0, head.length)) !== hex(head)) {
    throw new Error("the job message is not a gpunet job for this lease: not signed");
  }
  const body = JSON.parse(new TextDecoder().decode(message.subarray(head.length))) as Record<string, unknown>;
  if (!sameJson(body, { job, gpus_per_node: null, job_number: number }) || !sameJson(prepared.job, { ...job, secrets: [], ray: false })) {
    throw new Error("the job the coordinator prepared is not the form's: not signed");
  }
  const signature = await signMessage(c, message);
  await postJson(`/leases/${lease}/job`, { job, gpus_per_node: null, job_number: number, signature });
}

// A GET of the coordinator's private routes, signed by the wallet as gpunet.protocol.sign_request does.
export async function signedGet(c: Connected, target: string): Promise<Record<string, unknown>> {
  const at = Date.now().toString();
  const nonce = hex(crypto.getRandomValues(new Uint8Array(8)));
  const digest = hex(await crypto.subtle.digest("SHA-256", new Uint8Array()));
  const lines = `GET\n${target}\n${digest}\n${at}\n${c.account.address}\n${nonce}`;
  const signature = await signMessage(c, concat(text.encode(REQUEST_TAG), text.encode(lines)));
  const response = await fetch(target, {
    headers: {
      "X-Gpunet-Time-Ms": at,
      "X-Gpunet-Wallet": c.account.address,
      "X-Gpunet-Nonce": nonce,
      "X-Gpunet-Signature": signature,
    },
  });
  const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (!response.ok) throw new Error(String(answer.error ?? `${target} answered ${response.status}`));
  return answer;
}
