// What each wallet action expects of the coordinator's transaction, from the page's own form and the
// addresses the page derives itself (check.ts compares), and what the signing screen says it does.
import { type Address, address } from "@solana/kit";

import {
  cohortPda,
  configPda,
  delegationPda,
  ioAccount,
  leasePda,
  leaseVaultPda,
  poolPda,
  providerPda,
  rewardIndexPda,
  stakeVaultPda,
  stakingPda,
} from "./addresses";
import { type Expected, SYSTEM_PROGRAM, TOKEN_PROGRAM } from "./check";
import { formatIo } from "./ui";

export interface Context {
  program: Address;
  wallet: Address;
  mint: Address;
}

export interface Plan {
  action: string; // the coordinator's /web/api/tx/{action}
  title: string;
  does: string; // said by the page, from its form: never the coordinator's words
  amount: bigint; // IO base units leaving the wallet (escrow or stake); 0 when none
  amountLabel: string;
  form: Record<string, string>; // sent to the coordinator (u64s as strings)
  expected: Expected;
}

export function escrowFor(pricePerGpuHour: bigint, gpus: bigint, seconds: bigint): bigint {
  return (pricePerGpuHour * gpus * seconds + 3599n) / 3600n; // rounded up, as the program's escrow_for
}

const token = address(TOKEN_PROGRAM);

export interface LeaseForm {
  leaseId: bigint;
  gpuModel: bigint;
  minVramGb: bigint;
  gpuCount: bigint;
  region: bigint;
  maxPricePerGpuHour: bigint;
  durationSeconds: bigint;
}

export async function openLease(ctx: Context, f: LeaseForm): Promise<Plan> {
  const lease = await leasePda(ctx.program, ctx.wallet, f.leaseId);
  const escrow = escrowFor(f.maxPricePerGpuHour, f.gpuCount, f.durationSeconds);
  return {
    action: "open_lease",
    title: "Open a lease",
    does: `Opens lease ${lease} for ${f.gpuCount} GPUs over ${f.durationSeconds} s at most ${formatIo(f.maxPricePerGpuHour)} per GPU-hour, and moves its escrow from your IO account into the lease's vault.`,
    amount: escrow,
    amountLabel: "Escrow",
    form: {
      lease_id: f.leaseId.toString(),
      gpu_model: f.gpuModel.toString(),
      min_vram_gb: f.minVramGb.toString(),
      gpu_count: f.gpuCount.toString(),
      region: f.region.toString(),
      max_price_per_gpu_hour: f.maxPricePerGpuHour.toString(),
      duration_seconds: f.durationSeconds.toString(),
    },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "open_lease",
          accounts: {
            client: ctx.wallet,
            config: await configPda(ctx.program),
            lease,
            lease_vault: await leaseVaultPda(ctx.program, lease),
            client_tokens: await ioAccount(ctx.wallet, ctx.mint),
            io_mint: ctx.mint,
            token_program: token,
            system_program: address(SYSTEM_PROGRAM),
          },
          args: {
            lease_id: f.leaseId,
            terms: {
              gpu_model: f.gpuModel,
              min_vram_gb: f.minVramGb,
              gpu_count: f.gpuCount,
              region: f.region,
              max_price_per_gpu_hour: f.maxPricePerGpuHour,
              duration_seconds: f.durationSeconds,
            },
            downtime_tolerance_seconds: 0n,
          },
        },
      ],
    },
  };
}

export interface LeaseFacts {
  lease: Address;
  gpuCount: bigint;
  maxPricePerGpuHour: bigint;
  nodes: Address[];
}

export async function topUp(ctx: Context, l: LeaseFacts, extraSeconds: bigint): Promise<Plan> {
  const amount = escrowFor(l.maxPricePerGpuHour, l.gpuCount, extraSeconds);
  return {
    action: "top_up",
    title: "Top up a lease",
    does: `Extends lease ${l.lease} by ${extraSeconds} s, escrowing ${formatIo(amount)} more from your IO account.`,
    amount,
    amountLabel: "Escrow added",
    form: { lease: l.lease, extra_seconds: extraSeconds.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "top_up_lease",
          accounts: {
            client: ctx.wallet,
            config: await configPda(ctx.program),
            lease: l.lease,
            lease_vault: await leaseVaultPda(ctx.program, l.lease),
            client_tokens: await ioAccount(ctx.wallet, ctx.mint),
            token_program: token,
          },
          args: { extra_seconds: extraSeconds },
        },
      ],
    },
  };
}

export async function closeLease(ctx: Context, l: LeaseFacts): Promise<Plan> {
  return {
    action: "close",
    title: "Close a lease",
    does: `Closes lease ${l.lease}: billing stops now, and what no usage can cost any more comes back to your IO account.`,
    amount: 0n,
    amountLabel: "Paid",
    form: { lease: l.lease },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "close_lease",
          accounts: {
            closer: ctx.wallet,
            config: await configPda(ctx.program),
            lease: l.lease,
            lease_vault: await leaseVaultPda(ctx.program, l.lease),
            client: ctx.wallet,
            client_tokens: await ioAccount(ctx.wallet, ctx.mint),
            token_program: token,
          },
          remaining: l.nodes.map((n) => ({ address: n, writable: true })),
          args: {},
        },
      ],
    },
  };
}

async function stakeAccounts(ctx: Context): Promise<Record<string, Address>> {
  const provider = await providerPda(ctx.program, ctx.wallet);
  return {
    authority: ctx.wallet,
    config: await configPda(ctx.program),
    provider,
    stake_vault: await stakeVaultPda(ctx.program, provider),
    authority_tokens: await ioAccount(ctx.wallet, ctx.mint),
    token_program: token,
  };
}

export async function stake(ctx: Context, amount: bigint): Promise<Plan> {
  return {
    action: "stake",
    title: "Stake",
    does: `Moves ${formatIo(amount)} from your IO account into your provider's stake vault.`,
    amount,
    amountLabel: "Stake",
    form: { amount: amount.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [{ name: "stake", accounts: await stakeAccounts(ctx), args: { amount } }],
    },
  };
}

export async function unstake(ctx: Context, amount: bigint): Promise<Plan> {
  const { authority, config, provider } = await stakeAccounts(ctx);
  return {
    action: "unstake",
    title: "Unstake",
    does: `Starts unbonding ${formatIo(amount)} of your stake; you withdraw it once the unbonding period is over.`,
    amount: 0n,
    amountLabel: "Paid",
    form: { amount: amount.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [{ name: "request_unstake", accounts: { authority: authority!, config: config!, provider: provider! }, args: { amount } }],
    },
  };
}

export async function withdraw(ctx: Context, unbonding: bigint): Promise<Plan> {
  return {
    action: "withdraw",
    title: "Withdraw unbonded stake",
    does: `Moves your unbonded stake (${formatIo(unbonding)}) from the stake vault back to your IO account.`,
    amount: 0n,
    amountLabel: "Paid",
    form: {},
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [{ name: "withdraw_unstaked", accounts: await stakeAccounts(ctx), args: {} }],
    },
  };
}

// --- co-staking: a token holder's positions in providers' pools

// A position as the page acts on it: which pool and nonce (the page derives its accounts from them
// and the connected wallet), and the figures the coordinator read, shown only.
export interface PositionFacts {
  provider: Address;
  nonce: bigint;
  amount: bigint; // what its stake is worth now
  exitEpoch: bigint | null; // the epoch it was undelegated in; null while active
  indexEpochs: bigint[]; // the epochs whose reward index a collect passes (read-only)
}

export async function delegate(ctx: Context, provider: Address, nonce: bigint, amount: bigint): Promise<Plan> {
  return {
    action: "delegate",
    title: "Delegate",
    does: `Moves ${formatIo(amount)} from your IO account into the pool of provider ${provider} as your position ${nonce}: it backs the provider at once, is slashed with the pool for its supplier's malicious faults, and earns from the next epoch on.`,
    amount,
    amountLabel: "Delegated",
    form: { provider, nonce: nonce.toString(), amount: amount.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "delegate",
          accounts: {
            delegator: ctx.wallet,
            config: await configPda(ctx.program),
            staking: await stakingPda(ctx.program),
            provider,
            pool: await poolPda(ctx.program, provider),
            stake_vault: await stakeVaultPda(ctx.program, provider),
            delegator_tokens: await ioAccount(ctx.wallet, ctx.mint),
            delegation: await delegationPda(ctx.program, provider, ctx.wallet, nonce),
            token_program: token,
            system_program: address(SYSTEM_PROGRAM),
          },
          args: { nonce, amount },
        },
      ],
    },
  };
}

// `epoch`: the epoch now by the chain's clock; the program puts the position in that epoch's cohort.
export async function undelegate(ctx: Context, p: PositionFacts, epoch: bigint): Promise<Plan> {
  return {
    action: "undelegate",
    title: "Undelegate",
    does: `Moves your position ${p.nonce} in the pool of provider ${p.provider} (${formatIo(p.amount)} now) into epoch ${epoch}'s unbonding: it earns through this epoch, stays slashable while it unbonds, and you withdraw it once that ends.`,
    amount: 0n,
    amountLabel: "Paid",
    form: { provider: p.provider, nonce: p.nonce.toString(), epoch: epoch.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "undelegate",
          accounts: {
            delegator: ctx.wallet,
            config: await configPda(ctx.program),
            staking: await stakingPda(ctx.program),
            provider: p.provider,
            pool: await poolPda(ctx.program, p.provider),
            delegation: await delegationPda(ctx.program, p.provider, ctx.wallet, p.nonce),
            cohort: await cohortPda(ctx.program, p.provider, epoch),
            system_program: address(SYSTEM_PROGRAM),
          },
          args: {},
        },
      ],
    },
  };
}

export async function withdrawDelegation(ctx: Context, p: PositionFacts): Promise<Plan> {
  if (p.exitEpoch === null) throw new Error(`Position ${p.nonce} is active: undelegate it first`);
  return {
    action: "withdraw_delegation",
    title: "Withdraw a position",
    does: `Moves your unbonded position ${p.nonce} (${formatIo(p.amount)}) from the stake vault of provider ${p.provider} back to your IO account.`,
    amount: 0n,
    amountLabel: "Paid",
    form: { provider: p.provider, nonce: p.nonce.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "withdraw_delegation",
          accounts: {
            delegator: ctx.wallet,
            config: await configPda(ctx.program),
            provider: p.provider,
            stake_vault: await stakeVaultPda(ctx.program, p.provider),
            delegation: await delegationPda(ctx.program, p.provider, ctx.wallet, p.nonce),
            cohort: await cohortPda(ctx.program, p.provider, p.exitEpoch),
            delegator_tokens: await ioAccount(ctx.wallet, ctx.mint),
            token_program: token,
          },
          args: {},
        },
      ],
    },
  };
}

export async function collectRewards(ctx: Context, p: PositionFacts, rewards: bigint): Promise<Plan> {
  return {
    action: "collect_rewards",
    title: "Collect rewards",
    does: `Pays your position ${p.nonce} in the pool of provider ${p.provider} its credited rewards (${formatIo(rewards)}) to your IO account.`,
    amount: 0n,
    amountLabel: "Paid",
    form: { provider: p.provider, nonce: p.nonce.toString() },
    expected: {
      wallet: ctx.wallet,
      program: ctx.program,
      instructions: [
        {
          name: "collect_rewards",
          accounts: {
            config: await configPda(ctx.program),
            provider: p.provider,
            pool: await poolPda(ctx.program, p.provider),
            stake_vault: await stakeVaultPda(ctx.program, p.provider),
            delegation: await delegationPda(ctx.program, p.provider, ctx.wallet, p.nonce),
            delegator: ctx.wallet,
            delegator_tokens: await ioAccount(ctx.wallet, ctx.mint),
            token_program: token,
          },
          remaining: await Promise.all(
            p.indexEpochs.map(async (e) => ({ address: await rewardIndexPda(ctx.program, p.provider, e), writable: false })),
          ),
          args: {},
        },
      ],
    },
  };
}
