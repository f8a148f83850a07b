// gpunet's IDL as the page reads it: the instructions' discriminators, their accounts' writable/signer
// flags, and their argument layouts, with a small Borsh decoder for the argument types the wallet
// actions use. The IDL (gpunet/idl/gpunet.json) is bundled into wallet.js at build time rather than
// fetched from the coordinator (which serves the same file at /web/api/idl for other tools): what the
// page checks transactions against is then covered by the bundle's published SHA-256, and a
// coordinator cannot loosen the checks by serving another IDL.
import bundled from "../../gpunet/idl/gpunet.json";

export type IdlType = string | { defined: { name: string } } | { array: [IdlType, number] } | { vec: IdlType };

export interface IdlAccount {
  name: string;
  writable?: boolean;
  signer?: boolean;
}

export interface IdlInstruction {
  name: string;
  discriminator: number[];
  accounts: IdlAccount[];
  args: { name: string; type: IdlType }[];
}

export interface Idl {
  address: string;
  instructions: IdlInstruction[];
  types: { name: string; type: { kind: string; fields?: { name: string; type: IdlType }[] } }[];
  errors?: { code: number; name: string; msg?: string }[];
}

export type Value = bigint | boolean | Value[] | { [field: string]: Value };

export const IDL = bundled as unknown as Idl;

const SIZES: Record<string, number> = { u8: 1, i8: 1, u16: 2, i16: 2, u32: 4, i32: 4, u64: 8, i64: 8 };

// Borsh: little-endian integers, bools as one byte, structs field by field, fixed arrays in place,
// vectors after a u32 length. Reading past the end throws: a short argument is not an instruction.
class Reader {
  at = 0;
  constructor(private readonly data: Uint8Array) {}

  int(type: string): bigint {
    const size = SIZES[type];
    if (size === undefined) throw new Error(`the page cannot decode an argument of type ${type}`);
    if (this.at + size > this.data.length) throw new Error("the instruction's data is shorter than its arguments");
    let value = 0n;
    for (let i = size - 1; i >= 0; i--) value = (value << 8n) | BigInt(this.data[this.at + i]!);
    this.at += size;
    if (type.startsWith("i") && value >= 1n << BigInt(size * 8 - 1)) value -= 1n << BigInt(size * 8);
    return value;
  }
}

function read(idl: Idl, reader: Reader, type: IdlType): Value {
  if (typeof type === "string") {
    if (type === "bool") return reader.int("u8") !== 0n;
    return reader.int(type);
  }
  if ("array" in type) return Array.from({ length: type.array[1] }, () => read(idl, reader, type.array[0]));
  if ("vec" in type) {
    const length = Number(reader.int("u32"));
    return Array.from({ length }, () => read(idl, reader, type.vec));
  }
  const defined = idl.types.find((t) => t.name === type.defined.name);
  if (!defined || defined.type.kind !== "struct" || !defined.type.fields) {
    throw new Error(`the page cannot decode type ${type.defined.name}`);
  }
  const out: { [field: string]: Value } = {};
  for (const field of defined.type.fields) out[field.name] = read(idl, reader, field.type);
  return out;
}

function sameBytes(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export interface DecodedInstruction {
  instruction: IdlInstruction;
  args: { [name: string]: Value };
}

// The gpunet instruction `data` encodes (by its 8-byte discriminator) and its arguments; trailing
// bytes are refused, so nothing can ride along unread.
export function decodeInstruction(idl: Idl, data: Uint8Array): DecodedInstruction {
  const head = data.subarray(0, 8);
  const instruction = idl.instructions.find((i) => sameBytes(i.discriminator, head));
  if (!instruction) throw new Error("an instruction to gpunet that its IDL does not name");
  const reader = new Reader(data.subarray(8));
  const args: { [name: string]: Value } = {};
  for (const arg of instruction.args) args[arg.name] = read(idl, reader, arg.type);
  if (reader.at !== data.length - 8) throw new Error(`${instruction.name}: its data carries bytes beyond its arguments`);
  return { instruction, args };
}
