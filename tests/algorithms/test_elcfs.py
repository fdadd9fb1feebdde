"""FedDG-ELCFS, adapted (fedpath.algorithms.elcfs): clients upload low-band
amplitude spectra (checked against numpy's FFT), the server sends each client the
others' bank, and view b is a SimCLR view of the amplitude-mixed image."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.elcfs import ELCFSClient, ELCFSServer
from fedpath.algorithms.names import AMPLITUDE, AMPLITUDE_BANK, FIT, SHARED, WEIGHTS
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.ssl.amplitude import amplitude_mix
from fedpath.ssl.augment import simclr_augment
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves
from tests.ssl_helpers import ssl_cfg

#: ELCFS's begin reads the payload only, not the network
NO_NET: Any = None


@pytest.fixture
def elcfs(tmp_path: Path) -> Halves:
    over = ["algorithm.params.images_per_client=5", "algorithm.params.beta=0.2"]
    return halves(ssl_cfg(tmp_path, "elcfs", *over))


def numpy_low_band(images: np.ndarray, s: int) -> np.ndarray:
    """The centred s x s square of |fftshift(fft2(x))| per channel."""
    spec = np.abs(np.fft.fftshift(np.fft.fft2(images), axes=(-2, -1)))
    c = images.shape[-1] // 2
    return spec[..., c - s // 2 : c + s // 2 + 1, c - s // 2 : c + s // 2 + 1]


def test_upload_is_the_low_band_amplitude_of_a_few_own_images(elcfs: Halves) -> None:
    reply = elcfs.client().handle(AMPLITUDE, Payload({}, {"round": 1}), ClientState())
    assert set(reply.arrays) == {AMPLITUDE}  # no weights, no images
    amps = reply.group(AMPLITUDE)["low_band"]
    s = 2 * int(0.2 * 16 / 2) + 1  # s = 2 floor(beta size / 2) + 1
    assert amps.shape == (5, 3, s, s) and reply.scalars["num_images"] == 5
    data = elcfs.data()
    own = numpy_low_band(data.load(np.arange(len(data))).double().numpy() / 255, s)
    for row in amps:
        assert np.abs(own - row).reshape(len(own), -1).max(1).min() < 1e-3


def amplitude_upload(shape: tuple[int, ...], value: float = 1.0) -> Payload:
    return Payload({AMPLITUDE: {"low_band": np.full(shape, value, np.float32)}})


def test_stages_and_unusable_uploads(elcfs: Halves) -> None:
    server = elcfs.server(["a", "b"])
    assert isinstance(server, ELCFSServer)
    assert server.stages(1) == (AMPLITUDE, FIT)
    assert server.stages(2) == (AMPLITUDE, FIT)  # the bank is still empty
    logs = server.aggregate(
        AMPLITUDE,
        1,
        {"a": amplitude_upload((2, 3, 3, 3)), "b": amplitude_upload((3, 3, 3, 3))},
    )
    assert logs == {"bank_entries": 5}
    assert server.stages(2) == (FIT,)
    for bad in ((2, 3, 5, 5), (3, 3, 3), None):
        up = amplitude_upload(bad) if bad else amplitude_upload((1, 3, 3, 3), np.nan)
        with pytest.raises(ProtocolError, match="client b sent an unusable amplitude"):
            server.aggregate(AMPLITUDE, 2, {"b": up})


def test_an_empty_bank_falls_back_to_own_amplitudes(
    elcfs: Halves, caplog: pytest.LogCaptureFixture
) -> None:
    client = elcfs.client("lonely")
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        client.begin(NO_NET, Payload(), ClientState())
    assert "client lonely received an empty amplitude bank" in caplog.text
    own = client.own_amplitudes("own-amplitude")
    np.testing.assert_array_equal(client.bank.numpy(), own)
    received = np.full((4, 3, 3, 3), 2.0, np.float32)
    client.begin(
        NO_NET, Payload({AMPLITUDE_BANK: {"low_band": received}}), ClientState()
    )
    np.testing.assert_array_equal(client.bank.numpy(), received)


def test_view_b_is_a_simclr_view_of_the_amplitude_mixed_batch(elcfs: Halves) -> None:
    client = elcfs.client()
    assert isinstance(client, ELCFSClient)
    bank = np.random.default_rng(0).uniform(0, 20, (4, 3, 3, 3)).astype(np.float32)
    client.begin(NO_NET, Payload({AMPLITUDE_BANK: {"low_band": bank}}), ClientState())
    client.aug = client.params.augmentation()
    x = elcfs.data().load(np.arange(4)).float() / 255
    client.generator = torch.Generator().manual_seed(7)
    a, b = client.views(x)
    g = torch.Generator().manual_seed(7)  # the same draws, in the same order
    mixed = amplitude_mix(x, torch.from_numpy(bank), g, 0.2)
    assert not torch.allclose(mixed, x, atol=1e-3)
    ref_a = simclr_augment(x, g, client.aug)
    simclr_augment(x, g, client.aug)
    ref_b = simclr_augment(mixed, g, client.aug)
    torch.testing.assert_close(a, ref_a)
    torch.testing.assert_close(b, ref_b)


def test_elcfs_bank_excludes_own_entries_and_survives_checkpoints(
    tmp_path: Path,
) -> None:
    cfg = ssl_cfg(tmp_path, "elcfs")
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    run.run()
    server = run.server
    assert isinstance(server, ELCFSServer)
    clients = sorted(server.bank)
    assert len(clients) == 4
    msgs = server.configure("fit", 2, clients)
    for c in clients:
        bank = msgs[c].arrays[AMPLITUDE_BANK]["low_band"]
        assert len(bank) == sum(len(server.bank[o]) for o in clients if o != c)
        received = {row.tobytes() for row in bank}
        assert not any(row.tobytes() in received for row in server.bank[c])
        assert SHARED in msgs[c].arrays and WEIGHTS in msgs[c].arrays
    twin = ELCFSServer(server.params, server.ctx)
    twin.load_state(server.state())
    assert sorted(twin.bank) == clients
    assert server.stages(2) == ("fit",)
