// The addresses the page expects in a transaction, derived here (never taken from the coordinator):
// gpunet's PDAs with the program's seeds (programs/gpunet/src/state/seeds.rs) and the wallet's
// associated token account.
import { type Address, address, getAddressEncoder, getProgramDerivedAddress } from "@solana/kit";

import { TOKEN_PROGRAM } from "./check";

const ATA_PROGRAM = address("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL");
const text = new TextEncoder();
const key = (a: Address) => getAddressEncoder().encode(a);

async function pda(program: Address, ...seeds: (string | Uint8Array | ReadonlyUint8ArrayLike)[]): Promise<Address> {
  const encoded = seeds.map((s) => (typeof s === "string" ? text.encode(s) : new Uint8Array(s)));
  return (await getProgramDerivedAddress({ programAddress: program, seeds: encoded }))[0];
}
type ReadonlyUint8ArrayLike = ArrayLike<number>;

function u64le(value: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, value, true);
  return out;
}

// Epochs are the program's i64s (a cohort's exit epoch, a reward index's epoch).
function i64le(value: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, value, true);
  return out;
}

export const configPda = (program: Address) => pda(program, "config");
export const leasePda = (program: Address, client: Address, id: bigint) => pda(program, "lease", key(client), u64le(id));
export const leaseVaultPda = (program: Address, lease: Address) => pda(program, "lease_vault", key(lease));
export const providerPda = (program: Address, authority: Address) => pda(program, "provider", key(authority));
export const stakeVaultPda = (program: Address, provider: Address) => pda(program, "stake_vault", key(provider));
// Co-staking: pools, positions, cohorts and reward indexes are keyed by the provider account.
export const stakingPda = (program: Address) => pda(program, "staking");
export const poolPda = (program: Address, provider: Address) => pda(program, "pool", key(provider));
export const delegationPda = (program: Address, provider: Address, delegator: Address, nonce: bigint) =>
  pda(program, "delegation", key(provider), key(delegator), u64le(nonce));
export const cohortPda = (program: Address, provider: Address, exitEpoch: bigint) =>
  pda(program, "cohort", key(provider), i64le(exitEpoch));
export const rewardIndexPda = (program: Address, provider: Address, epoch: bigint) =>
  pda(program, "reward_index", key(provider), i64le(epoch));
export const ioAccount = (owner: Address, mint: Address) =>
  pda(ATA_PROGRAM, key(owner), key(address(TOKEN_PROGRAM)), key(mint));
