"""The approval package on its own: canonical plans and ids, the policy file, approvers'
signatures and the rules that decide whether a plan's approvals suffice."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from payrun._models import LedgerRow, PayeeCheck, RowStatus
from payrun.approval import (
    NO_POLICY,
    Approval,
    Plan,
    PlanRow,
    Policy,
    Rejection,
    approvals_needed,
    check_approvals,
    load_policy,
    new_private_key_pem,
    plan_from_document,
    public_key_pem,
    refuse_approver,
    refuse_closed,
    refuse_outside_policy,
    refuse_rejecter,
    sign_plan,
    signature_verifies,
)
from payrun.approval._keys import load_private_key, rejection_verifies, sign_rejection
from payrun.errors import ApprovalError, ConfigError, PolicyError

_NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def _row(number: int, amount: str = "100.00", name: str = "Ada Lovelace") -> LedgerRow:
    return LedgerRow(
        row=number,
        row_id=f"E{number}",
        payee_name=name,
        sort_code="040004",
        account_number="12345678",
        amount=Decimal(amount),
        reference="NOV PAY",
        source_account="040004 30000001",
        status=RowStatus.PENDING,
    )


def _plan(*amounts: str, new_payees: tuple[int, ...] = (), maker: str = "carol") -> Plan:
    rows = tuple(PlanRow.of(_row(i + 2, a)) for i, a in enumerate(amounts))
    return Plan(
        rows=rows,
        held=(),
        invalid=(),
        new_payee_rows=new_payees,
        changed_detail_rows=(),
        options={"source_account": None},
        pay_date=None,
        policy_digest=None,
        maker=maker,
        created_at=_NOW,
        expires_at=_NOW + timedelta(days=7),
    )


def _key(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.pem"
    path.write_bytes(new_private_key_pem())
    path.chmod(0o600)
    return path


def _policy_text(approvers: dict[str, Path], rules: str = "") -> str:
    entries = "".join(
        f'[[approver]]\nname = "{name}"\n'
        f'public_key = """{public_key_pem(load_private_key(path))}"""\n'
        for name, path in approvers.items()
    )
    return f"[approval]\n{rules}\n{entries}"


def _policy(tmp_path: Path, approvers: dict[str, Path], rules: str = "") -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(_policy_text(approvers, rules))
    path.chmod(0o600)
    return load_policy(path)


def _approval(plan: Plan, name: str, key: Path) -> Approval:
    private = load_private_key(key)
    return Approval(name, _NOW, None, sign_plan(private, plan.plan_id), public_key_pem(private))


def test_plan_id_is_the_sha256_of_the_canonical_text() -> None:
    """The id is the sha256 (hex) of the canonical JSON's UTF-8 bytes."""
    plan = _plan("100.00", "250.50")
    assert plan.plan_id == hashlib.sha256(plan.canonical().encode()).hexdigest()
    assert '"pay_date":null' in plan.canonical()


@pytest.mark.parametrize(
    "field", ["payee_name", "sort_code", "account_number", "amount", "reference", "row_id"]
)
def test_any_row_change_changes_the_plan_id(field: str) -> None:
    """Each payee detail, the amount, the reference and the row id are bound by the id."""
    plan = _plan("100.00")
    changed = plan.rows[0].__class__(
        **{**{f: getattr(plan.rows[0], f) for f in plan.rows[0].__slots__}, field: "9"}
    )
    other = Plan(**{**{f: getattr(plan, f) for f in plan.__slots__}, "rows": (changed,)})
    assert other.plan_id != plan.plan_id


def test_stored_plan_round_trips_and_an_altered_one_is_refused() -> None:
    """A stored plan reads back equal; text that no longer hashes to its id is refused."""
    plan = _plan("100.00")
    assert plan_from_document(plan.plan_id, plan.canonical()) == plan
    altered = plan.canonical().replace("100.00", "900.00")
    with pytest.raises(ApprovalError, match="altered"):
        plan_from_document(plan.plan_id, altered)


def _check(held: str | None = None) -> PayeeCheck:
    return PayeeCheck(
        rows=(2,),
        payee_name="Ada Lovelace",
        sort_code="040004",
        account_number="12345678",
        result="close-match" if held else "match",
        reason="close-match-name" if held else None,
        suggested_name="Ada King" if held else None,
        cop_request_url="/v0/cop-requests/cp.1",
        held=held,
    )


def test_cop_answers_are_bound_by_the_plan_id_and_reused_by_its_run() -> None:
    """A plan's Confirmation of Payee answers are in its canonical text (a changed answer
    changes the id), read back equal, and give its run each planned new payee's CoP request;
    a held answer gives none."""
    plan = dataclasses.replace(_plan("100.00", new_payees=(2,)), payee_checks=(_check(),))
    assert json.loads(plan.canonical())["cop"][0]["result"] == "match"
    assert plan_from_document(plan.plan_id, plan.canonical()) == plan
    assert plan.approved_rows().cop_requests == {2: "/v0/cop-requests/cp.1"}
    held = dataclasses.replace(plan, payee_checks=(_check("Confirmation of Payee: close"),))
    assert held.plan_id != plan.plan_id and held.approved_rows().cop_requests == {}
    assert (plan.cop_matched, plan.cop_held, held.cop_matched, held.cop_held) == (1, 0, 0, 1)


def test_a_plan_of_layout_1_reads_and_hashes_as_it_was_made() -> None:
    """A plan recorded before CoP answers were kept (layout 1, no "cop") still verifies."""
    old = _plan("100.00")
    document = json.loads(old.canonical())
    del document["cop"]
    document["version"] = 1
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    plan_id = hashlib.sha256(text.encode()).hexdigest()
    read = plan_from_document(plan_id, text)
    assert read.plan_id == plan_id and read.payee_checks == () and read.version == 1


def test_differences_name_a_changed_amount_a_new_row_and_a_gone_row() -> None:
    """The file is compared row by row with the plan; any difference is named."""
    plan = _plan("100.00", "200.00")
    assert plan.differences([_row(2, "100.00"), _row(3, "200.00")]) is None
    assert "amount 200.00 -> 201.00" in str(
        plan.differences([_row(2, "100.00"), _row(3, "201.00")])
    )
    assert plan.differences([_row(2), _row(3, "200.00"), _row(4)]) == "row 4 is new"
    assert plan.differences([_row(2)]) == "row 3 is gone"


def test_a_policy_writable_by_others_is_refused(tmp_path: Path) -> None:
    """Group- or world-writable policy files are refused: whoever edits it approves."""
    path = tmp_path / "policy.toml"
    path.write_text("[approval]\nrequired = true\n")
    for mode in (0o620, 0o602):
        path.chmod(mode)
        with pytest.raises(PolicyError, match="chmod go-w"):
            load_policy(path)
    path.chmod(0o644)
    assert load_policy(path).required


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_a_policy_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """A policy owned by another non-root user is refused, even if only they can write it."""
    path = tmp_path / "policy.toml"
    path.write_text("[approval]\n")
    path.chmod(0o644)
    os.chown(path, 4321, 4321)
    with pytest.raises(PolicyError, match="another user"):
        load_policy(path)


def test_policy_values_are_read_and_checked(tmp_path: Path) -> None:
    """Every setting is read, the digest is the file's sha256, and bad values are refused."""
    alice = _key(tmp_path, "alice")
    rules = (
        'required = true\napprovers = 2\nsecond_approver_above = "50000.00"\n'
        "second_approver_for_new_payees = true\nexpires_after_days = 0.5\n"
        'max_payment = "25000.00"\n'
    )
    policy = _policy(tmp_path, {"alice": alice}, rules)
    assert policy.required and policy.approvers_needed == 2
    assert policy.second_approver_above == Decimal("50000.00")
    assert policy.expires_after == timedelta(hours=12)
    assert policy.max_payment == Decimal("25000.00")
    assert policy.approver("alice") is not None
    digest = hashlib.sha256((tmp_path / "policy.toml").read_bytes()).hexdigest()
    assert policy.digest == digest
    for bad in ("approvers = 0", 'max_payment = "abc"', "expires_after_days = -1", "colour = 1"):
        (tmp_path / "policy.toml").write_text(f"[approval]\n{bad}\n")
        with pytest.raises(PolicyError):
            load_policy(tmp_path / "policy.toml")


def test_a_policy_with_a_key_that_is_not_ed25519_is_refused(tmp_path: Path) -> None:
    """An approver's public_key must be an Ed25519 public key."""
    path = tmp_path / "policy.toml"
    path.write_text('[[approver]]\nname = "bob"\npublic_key = "not a key"\n')
    path.chmod(0o600)
    with pytest.raises(PolicyError, match="bob"):
        load_policy(path)


def test_a_signature_verifies_only_with_its_own_key(tmp_path: Path) -> None:
    """Signatures verify with the signer's public key and no other, for that id only."""
    alice = load_private_key(_key(tmp_path, "alice"))
    mallory = load_private_key(_key(tmp_path, "mallory"))
    plan = _plan("100.00")
    signature = sign_plan(alice, plan.plan_id)
    assert signature_verifies(public_key_pem(alice), plan.plan_id, signature)
    assert not signature_verifies(public_key_pem(mallory), plan.plan_id, signature)
    assert not signature_verifies(public_key_pem(alice), _plan("1.00").plan_id, signature)


def test_a_key_file_that_is_not_a_private_key_is_refused(tmp_path: Path) -> None:
    """An approver key file must hold an Ed25519 private key."""
    path = tmp_path / "key.pem"
    path.write_text("hello")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not an Ed25519 private key"):
        load_private_key(path)


def test_the_maker_an_unknown_approver_and_a_wrong_key_are_refused(tmp_path: Path) -> None:
    """Only a listed approver other than the maker, with their own key, may approve."""
    alice, bob = _key(tmp_path, "alice"), _key(tmp_path, "bob")
    policy = _policy(tmp_path, {"alice": alice, "carol": bob})
    plan = _plan("100.00", maker="carol")
    alice_public = public_key_pem(load_private_key(alice))
    with pytest.raises(ApprovalError, match="made plan"):
        refuse_approver(plan, policy, "carol", public_key_pem(load_private_key(bob)))
    with pytest.raises(ApprovalError, match="not an approver"):
        refuse_approver(plan, policy, "dave", alice_public)
    with pytest.raises(ApprovalError, match="not alice's"):
        refuse_approver(plan, policy, "alice", public_key_pem(load_private_key(bob)))
    refuse_approver(plan, policy, "alice", alice_public)
    with pytest.raises(ApprovalError, match="made plan"):
        refuse_approver(plan, NO_POLICY, "carol", alice_public)


def test_a_large_total_or_a_new_payee_needs_one_more_approver(tmp_path: Path) -> None:
    """At or above second_approver_above, or with a new payee, one approval is not enough."""
    alice, bob = _key(tmp_path, "alice"), _key(tmp_path, "bob")
    rules = 'second_approver_above = "1000.00"\nsecond_approver_for_new_payees = true\n'
    policy = _policy(tmp_path, {"alice": alice, "bob": bob}, rules)
    for plan in (_plan("600.00", "400.00"), _plan("10.00", new_payees=(2,))):
        assert approvals_needed(plan, policy)[0] == 2
        with pytest.raises(ApprovalError, match="needs 2 approval"):
            check_approvals(plan, [_approval(plan, "alice", alice)], policy)
        # The same approver twice is one approver
        twice = [_approval(plan, "alice", alice)] * 2
        with pytest.raises(ApprovalError, match="needs 2"):
            check_approvals(plan, twice, policy)
        check_approvals(
            plan, [_approval(plan, "alice", alice), _approval(plan, "bob", bob)], policy
        )
    small = _plan("999.99")
    check_approvals(small, [_approval(small, "alice", alice)], policy)


def test_signatures_are_checked_against_the_policy_as_it_is_now(tmp_path: Path) -> None:
    """An approval whose key the policy no longer holds (rotated, removed) does not count."""
    alice, new_alice = _key(tmp_path, "alice"), _key(tmp_path, "alice2")
    plan = _plan("100.00")
    approval = _approval(plan, "alice", alice)
    check_approvals(plan, [approval], _policy(tmp_path, {"alice": alice}))
    with pytest.raises(ApprovalError, match="valid approvals: none"):
        check_approvals(plan, [approval], _policy(tmp_path, {"alice": new_alice}))
    with pytest.raises(ApprovalError):
        check_approvals(plan, [approval], _policy(tmp_path, {"bob": alice}))


def test_the_makers_own_approval_never_counts(tmp_path: Path) -> None:
    """An approval recorded in the maker's name does not count (no policy either)."""
    carol = _key(tmp_path, "carol")
    plan = _plan("100.00", maker="carol")
    with pytest.raises(ApprovalError, match="needs 1"):
        check_approvals(plan, [_approval(plan, "carol", carol)], NO_POLICY)


def test_an_expired_or_rejected_plan_is_closed() -> None:
    """Past expires_at, or once rejected, a plan can be neither approved nor run."""
    plan = _plan("100.00")
    refuse_closed(plan, [], _NOW + timedelta(days=6))
    with pytest.raises(ApprovalError, match="expired"):
        refuse_closed(plan, [], _NOW + timedelta(days=7))
    with pytest.raises(ApprovalError, match="rejected by bob"):
        refuse_closed(plan, [Rejection("bob", _NOW, "wrong month")], _NOW)


def test_an_approver_key_other_users_can_read_is_refused(tmp_path: Path) -> None:
    """A key file readable by group or others is refused as the bank signing key is, with
    the chmod that fixes it; 0600 is read."""
    path = _key(tmp_path, "alice")
    load_private_key(path)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"chmod 600 .*alice\.pem") as caught:
        load_private_key(path)
    assert "\n" not in str(caught.value)


def test_two_approvers_with_one_key_are_refused(tmp_path: Path) -> None:
    """Two [[approver]] entries holding the same public key (however its PEM is laid out)
    would let one person count twice: the policy is refused."""
    alice = _key(tmp_path, "alice")
    pem = public_key_pem(load_private_key(alice))
    relaid = pem.strip()
    text = _policy_text({"alice": alice}) + (
        f'[[approver]]\nname = "alias"\npublic_key = """{relaid}"""\n'
    )
    assert relaid != pem
    path = tmp_path / "policy.toml"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(PolicyError, match="same public_key"):
        load_policy(path)


def test_one_key_counts_once_whatever_names_sign_with_it(tmp_path: Path) -> None:
    """Without a policy, two approvals under two names signed by one key are one approver."""
    alice = _key(tmp_path, "alice")
    plan = _plan("100.00")
    twice = [_approval(plan, "alice", alice), _approval(plan, "alias", alice)]
    needs_two = Policy(approvers_needed=2)
    with pytest.raises(ApprovalError, match="needs 2"):
        check_approvals(plan, twice, needs_two)
    bob = _key(tmp_path, "bob")
    counted = check_approvals(plan, [*twice, _approval(plan, "bob", bob)], needs_two)
    assert counted == ("alice", "bob")


def test_a_plan_is_checked_against_the_policy_in_force_not_the_makers(tmp_path: Path) -> None:
    """A plan made under another policy (or none) is refused under a policy; without a
    policy, a row above max_payment and the expiry are checked against the policy given."""
    alice = _key(tmp_path, "alice")
    policy = _policy(tmp_path, {"alice": alice}, 'max_payment = "100.00"')
    plan = _plan("500.00")
    with pytest.raises(ApprovalError, match="made under another policy"):
        refuse_outside_policy(plan, policy, _NOW, started=False)
    capped = Policy(max_payment=Decimal("100.00"))
    with pytest.raises(ApprovalError, match=r"row 2 £500\.00, above the policy's max_payment"):
        refuse_outside_policy(plan, capped, _NOW, started=False)
    short = Policy(expires_after=timedelta(days=1))
    refuse_outside_policy(plan, short, _NOW + timedelta(hours=23), started=False)
    with pytest.raises(ApprovalError, match="expired"):
        refuse_outside_policy(plan, short, _NOW + timedelta(days=2), started=False)
    # A resume is not stopped by the expiry
    refuse_outside_policy(plan, short, _NOW + timedelta(days=2), started=True)


def test_expiry_stops_only_a_plans_first_run_and_a_rejection_stops_all() -> None:
    """started (a run of the plan is in the trail): an expired plan may resume; a rejected
    one may not."""
    plan = _plan("100.00")
    later = _NOW + timedelta(days=30)
    refuse_closed(plan, [], later, started=True)
    with pytest.raises(ApprovalError, match="expired"):
        refuse_closed(plan, [], later)
    with pytest.raises(ApprovalError, match="rejected by bob"):
        refuse_closed(plan, [Rejection("bob", _NOW, "stop")], later, started=True)


def test_a_rejection_under_a_policy_needs_a_listed_approver_and_their_key(
    tmp_path: Path,
) -> None:
    """With a policy: someone it does not list, or a listed approver without their key
    (or with another's), may not reject; without a policy, anyone may."""
    alice, mallory = _key(tmp_path, "alice"), _key(tmp_path, "mallory")
    policy = _policy(tmp_path, {"alice": alice})
    plan = _plan("100.00")
    alice_pem = public_key_pem(load_private_key(alice))
    refuse_rejecter(plan, policy, "alice", alice_pem)
    with pytest.raises(ApprovalError, match="not an approver"):
        refuse_rejecter(plan, policy, "mallory", public_key_pem(load_private_key(mallory)))
    with pytest.raises(ApprovalError, match="needs alice's approver key"):
        refuse_rejecter(plan, policy, "alice", None)
    with pytest.raises(ApprovalError, match="needs alice's approver key"):
        refuse_rejecter(plan, policy, "alice", public_key_pem(load_private_key(mallory)))
    refuse_rejecter(plan, NO_POLICY, "anyone", None)


def test_a_rejection_signature_is_no_approval(tmp_path: Path) -> None:
    """A rejection signs 'reject <id>': it verifies as a rejection and never as an approval."""
    key = load_private_key(_key(tmp_path, "alice"))
    plan = _plan("100.00")
    signed = sign_rejection(key, plan.plan_id)
    assert rejection_verifies(public_key_pem(key), plan.plan_id, signed)
    assert not signature_verifies(public_key_pem(key), plan.plan_id, signed)
