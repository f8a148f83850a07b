// The page's check of every transaction before its wallet is asked to sign it. The coordinator builds
// the transactions (with the SDK's builders); nothing it says is trusted here: the page decodes the
// bytes with @solana/kit and gpunet's IDL and compares them with what its own form asked for. Each
// failed check refuses, with a message saying which, and the wallet is never asked.
import {
  type Address,
  getCompiledTransactionMessageDecoder,
  getPublicKeyFromAddress,
  getTransactionDecoder,
  type SignatureBytes,
  verifySignature,
} from "@solana/kit";

import { decodeInstruction, type Idl, type Value } from "./idl";

export const TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
export const COMPUTE_BUDGET_PROGRAM = "ComputeBudget111111111111111111111111111111";
export const SYSTEM_PROGRAM = "11111111111111111111111111111111";
const BASE_FEE_LAMPORTS = 5000n; // per signature
// The most a transaction of the app may pay in fees (base fee and priority fee): 0.01 SOL, far above
// what a priority fee costs even in congestion, far below what a coordinator could burn of the
// wallet's SOL by naming an absurd compute-unit price (the fee goes to the validators, not to it).
export const MAX_FEE_LAMPORTS = 10_000_000n;
const PROGRAM_NAMES: Record<string, string> = {
  [TOKEN_PROGRAM]: "the SPL token program",
  [COMPUTE_BUDGET_PROGRAM]: "the compute budget program",
  [SYSTEM_PROGRAM]: "the system program",
};

export class Refused extends Error {
  constructor(message: string) {
    super(`Refused before asking the wallet: ${message}`);
  }
}

// What the page's form asks for: one gpunet instruction, its accounts by their IDL names (every
// writable one named; the signer is the wallet) and its arguments.
export interface ExpectedInstruction {
  name: string;
  accounts: Record<string, Address>;
  remaining?: { address: Address; writable: boolean }[];
  args: Record<string, Value>;
}

export interface Expected {
  wallet: Address;
  program: Address;
  instructions: ExpectedInstruction[];
}

export interface Checked {
  messageBytes: Uint8Array;
  feeLamports: bigint;
  computeUnits: bigint;
  microLamportsPerUnit: bigint;
  args: Record<string, Value>[]; // each gpunet instruction's, as decoded
}

function equal(a: Value | undefined, b: Value | undefined): boolean {
  if (typeof a === "bigint" || typeof a === "boolean" || typeof b !== "object" || typeof a !== "object") {
    return a === b;
  }
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => equal(v, b[i]));
  }
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => equal(a[k], b[k]));
}

function show(value: Value | undefined): string {
  return JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? v.toString() : v));
}

function u32(data: Uint8Array, at: number): bigint {
  return BigInt(new DataView(data.buffer, data.byteOffset + at, 4).getUint32(0, true));
}

function u64(data: Uint8Array, at: number): bigint {
  return new DataView(data.buffer, data.byteOffset + at, 8).getBigUint64(0, true);
}

export function checkTransaction(idl: Idl, transaction: Uint8Array, expected: Expected): Checked {
  let decoded;
  let message;
  try {
    decoded = getTransactionDecoder().decode(transaction);
    message = getCompiledTransactionMessageDecoder().decode(decoded.messageBytes);
  } catch (e) {
    throw new Refused(`the coordinator's transaction cannot be decoded (${(e as Error).message})`);
  }
  // A legacy message lists every account it touches; a v0 one could load more from lookup tables.
  if (message.version !== "legacy") throw new Refused(`a ${message.version} transaction (the page checks legacy ones)`);
  if (expected.program !== idl.address) throw new Refused(`the IDL is for program ${idl.address}, not ${expected.program}`);
  const accounts = message.staticAccounts;
  const { numSignerAccounts, numReadonlySignerAccounts, numReadonlyNonSignerAccounts } = message.header;
  if (accounts[0] !== expected.wallet) {
    throw new Refused(`the fee payer is ${accounts[0]}, not the connected wallet ${expected.wallet}`);
  }
  if (numSignerAccounts !== 1) {
    throw new Refused(`it asks ${numSignerAccounts} signers: the wallet signs alone, as ${expected.wallet}`);
  }
  const writable = (i: number) =>
    i < numSignerAccounts - numReadonlySignerAccounts ||
    (i >= numSignerAccounts && i < accounts.length - numReadonlyNonSignerAccounts);

  // The accounts this action may write: the wallet, the IDL-writable accounts the page expects, and
  // the remaining accounts it names as writable. Any other writable account is refused.
  const mayWrite = new Set<string>([expected.wallet]);
  for (const want of expected.instructions) {
    const spec = idl.instructions.find((i) => i.name === want.name);
    if (!spec) throw new Refused(`the IDL has no instruction ${want.name}`);
    spec.accounts.forEach((a) => {
      const address = want.accounts[a.name];
      if (a.writable && address) mayWrite.add(address);
    });
    want.remaining?.forEach((r) => r.writable && mayWrite.add(r.address));
  }
  accounts.forEach((address, i) => {
    if (writable(i) && !mayWrite.has(address)) {
      throw new Refused(`it makes account ${address} writable, which this action does not need`);
    }
  });

  let computeUnits: bigint | undefined;
  let price: bigint | undefined;
  const args: Record<string, Value>[] = [];
  let next = 0; // the next expected gpunet instruction
  for (const [n, ix] of message.instructions.entries()) {
    const program = accounts[ix.programAddressIndex];
    const data = new Uint8Array(ix.data ?? []);
    const indices = ix.accountIndices ?? [];
    if (program === COMPUTE_BUDGET_PROGRAM) {
      // Only a compute-unit limit and price, each once, before the action's instructions.
      if (next > 0 || indices.length) throw new Refused(`compute budget instruction ${n} is out of place`);
      if (data[0] === 2 && data.length === 5 && computeUnits === undefined) computeUnits = u32(data, 1);
      else if (data[0] === 3 && data.length === 9 && price === undefined) price = u64(data, 1);
      else throw new Refused(`compute budget instruction ${n} is not a compute-unit limit or price`);
      continue;
    }
    if (program !== expected.program) {
      const known = PROGRAM_NAMES[program ?? ""];
      throw new Refused(
        known
          ? `it carries an instruction of ${known} (instruction ${n}, e.g. a transfer) that this action does not need`
          : `it calls program ${program}, which is not gpunet's (${expected.program})`,
      );
    }
    const want = expected.instructions[next++];
    if (!want) throw new Refused(`it carries more gpunet instructions than this action needs`);
    let found;
    try {
      found = decodeInstruction(idl, data);
    } catch (e) {
      throw new Refused((e as Error).message);
    }
    if (found.instruction.name !== want.name) {
      throw new Refused(`instruction ${n} is gpunet's ${found.instruction.name}, not ${want.name}`);
    }
    const named = found.instruction.accounts;
    const remaining = want.remaining ?? [];
    if (indices.length !== named.length + remaining.length) {
      throw new Refused(`${want.name} passes ${indices.length} accounts, not ${named.length + remaining.length}`);
    }
    indices.forEach((index, i) => {
      const address = accounts[index];
      const spec = named[i];
      const expect = spec ? want.accounts[spec.name] : remaining[i - named.length]?.address;
      const what = spec ? spec.name : `remaining account ${i - named.length}`;
      if (spec?.signer && address !== expected.wallet) {
        throw new Refused(`${want.name}'s ${what} signs as ${address}, not as the wallet`);
      }
      if (expect !== undefined && address !== expect) {
        throw new Refused(`${want.name}'s ${what} is ${address}, not ${expect}`);
      }
    });
    for (const [name, value] of Object.entries(want.args)) {
      if (!equal(found.args[name], value)) {
        throw new Refused(`${want.name}'s ${name} is ${show(found.args[name])}, not the form's ${show(value)}`);
      }
    }
    args.push(found.args);
  }
  if (next !== expected.instructions.length) throw new Refused(`it lacks the action's ${expected.instructions[next]?.name}`);
  const units = computeUnits ?? 200000n;
  const micro = price ?? 0n;
  const feeLamports = BASE_FEE_LAMPORTS * BigInt(numSignerAccounts) + (units * micro + 999999n) / 1000000n;
  if (feeLamports > MAX_FEE_LAMPORTS) {
    throw new Refused(`its fee would be ${feeLamports} lamports, above the app's limit of ${MAX_FEE_LAMPORTS}`);
  }
  return {
    messageBytes: new Uint8Array(decoded.messageBytes),
    feeLamports,
    computeUnits: units,
    microLamportsPerUnit: micro,
    args,
  };
}

// The wallet's signature over the message it checked: a wallet that signed as another account, or a
// signature that does not verify, is refused before anything is sent.
export async function checkSigned(
  idl: Idl,
  signed: Uint8Array,
  expected: Expected,
): Promise<Checked> {
  const checked = checkTransaction(idl, signed, expected); // a wallet may add a budget, nothing else
  const signature = getTransactionDecoder().decode(signed).signatures[expected.wallet];
  if (!signature) throw new Error(`The wallet returned no signature as ${expected.wallet}: nothing was sent.`);
  const key = await getPublicKeyFromAddress(expected.wallet);
  if (!(await verifySignature(key, signature as SignatureBytes, checked.messageBytes))) {
    throw new Error(`The wallet's signature is not ${expected.wallet}'s over this transaction: nothing was sent.`);
  }
  return checked;
}
