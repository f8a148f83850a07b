//! Per-lease downtime tolerance: the client chooses at open how long the lease's nodes may be
//! silent before they are treated as lost, within bounds that keep suppliers safe from blips.

use crate::harness::*;
use gpunet::errors::GpunetError;
use gpunet::events::LeaseOpened;
use gpunet::state::{Lease, MAX_DOWNTIME_TOLERANCE_SECONDS, MIN_DOWNTIME_TOLERANCE_SECONDS};
use solana_signer::Signer;

#[test]
fn the_tolerance_is_stored_within_bounds_and_refused_outside_them() {
    let mut h = Harness::new();
    let client = h.client(1_000 * IO);
    let bad = [1, MIN_DOWNTIME_TOLERANCE_SECONDS - 1, MAX_DOWNTIME_TOLERANCE_SECONDS + 1, u32::MAX];
    for (id, tolerance) in bad.into_iter().enumerate() {
        let lease = LeaseRef::new(client.wallet.pubkey(), id as u64 + 1);
        let ix = h.open_lease_tolerant_ix(&client, &lease, terms(1, 1), tolerance);
        assert_error(h.send(&[ix], &[&client.wallet]), GpunetError::InvalidDowntimeTolerance);
        assert!(!h.exists(&lease.lease) && !h.exists(&lease.vault), "nothing was created");
    }
    assert_eq!(h.balance(&client.tokens), 1_000 * IO, "nothing was escrowed");

    // The controls: 0 (the network's default) and both bounds are stored as chosen and announced.
    for (id, tolerance) in [(10, 0), (11, MIN_DOWNTIME_TOLERANCE_SECONDS), (12, MAX_DOWNTIME_TOLERANCE_SECONDS)] {
        let lease = LeaseRef::new(client.wallet.pubkey(), id);
        let meta =
            h.send(&[h.open_lease_tolerant_ix(&client, &lease, terms(1, 1), tolerance)], &[&client.wallet]).unwrap();
        assert_eq!(event::<LeaseOpened>(&meta).downtime_tolerance_seconds, tolerance);
        assert_eq!(h.account::<Lease>(&lease.lease).downtime_tolerance_seconds, tolerance);
    }
}
