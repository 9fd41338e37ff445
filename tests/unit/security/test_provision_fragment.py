"""The config fragment `edged provision` writes (edged/appliance/provision.py fragment_text) reads back, through
edged's own config loader, as exactly the bundle's settings, whatever characters they hold."""

from __future__ import annotations

import string
from pathlib import Path

import nkeys
from hypothesis import given, settings
from hypothesis import strategies as st

from edged.appliance import bundle as bundlemod
from edged.appliance import fleet
from edged.appliance.provision import Layout, fragment_text, uses_domain_var
from edged.security.jwt import new_keypair
from edged.settings.config import options_from_text

ACC = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
JWT, SEED = fleet.mint_user(ACC, ACC.public_key.decode(), "d", {}, 0)
odd = st.text(alphabet=string.ascii_letters + string.digits + " \"'\\$#{}[]:,;=é→\t", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(host=odd, account=st.sampled_from(["", "LOCAL"]), deny=st.lists(odd, max_size=3), no_randomize=st.booleans(),
       domain=st.sampled_from(["", "d1", "edge_7-x"]), ca=st.booleans())
def test_the_fragment_reads_back_as_the_bundle(host: str, account: str, deny: list[str], no_randomize: bool,
                                               domain: str, ca: bool) -> None:
    b = bundlemod.make("dev1", [f"tls://{host}:7422"], JWT, SEED, domain=domain, account=account,
                       ca_pem="PEM" if ca else "", leafnode={"deny_imports": deny, "no_randomize": no_randomize})
    lay = Layout("/etc/edged/edged.conf")
    text = fragment_text(b, lay) + "jetstream { domain: $EDGED_DOMAIN }\naccounts { LOCAL {} }\n"
    opts = options_from_text(text)
    assert opts.leafnodes is not None
    [r] = opts.leafnodes.remotes
    assert r.urls == b.hub_urls and r.credentials == "/etc/edged/creds/device.creds"
    assert r.account == account and r.deny_imports == deny and r.no_randomize == no_randomize
    assert (r.tls.ca_file if r.tls else "") == ("/etc/edged/creds/ca.pem" if ca else "")
    assert opts.jetstream.domain == domain


def test_the_domain_variable_only_when_the_config_reads_it(tmp_path: Path) -> None:
    assert uses_domain_var(b"jetstream { domain: $EDGED_DOMAIN }\n")
    assert not uses_domain_var(b"# domain: $EDGED_DOMAIN\njetstream { domain: x } // $EDGED_DOMAIN\n")
    b = bundlemod.make("dev1", ["nats-leaf://h:7422"], JWT, SEED, domain="d1")
    assert "EDGED_DOMAIN" not in fragment_text(b, Layout(str(tmp_path / "e.conf")), domain_var=False)
    opts = options_from_text(fragment_text(b, Layout(str(tmp_path / "e.conf")), domain_var=False))
    assert opts.leafnodes is not None and len(opts.leafnodes.remotes) == 1
