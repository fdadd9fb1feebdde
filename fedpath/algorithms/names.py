"""The names that cross the network: stages and payload groups, in one place.

A *stage* is one step of a round, chosen by the server half (``stages(round)``);
a *group* is one named dict of arrays inside a :class:`~fedpath.types.Payload` or
a :class:`~fedpath.types.ClientState`. Client ids never appear inside these names:
a receiver knows who it talks to, and per-client content is stacked with an index
array where a server keeps it (FedHD's pool).
"""

from __future__ import annotations

# ------------------------------------------------------------------ stages
#: local training (every method)
FIT = "fit"
#: per-image stain statistics up (FedStain, FedCCRL, FedAlign)
STATS = "stats"
#: one synthetic slide per real slide up (FedHD, round 1)
DISTILL = "distill"
#: raw data up, for the non-private pooled upper bounds (central_*, pooled_mil)
UPLOAD = "upload"
#: amplitude spectra up (ELCFS)
AMPLITUDE = "amplitude"

# ------------------------------------------------------------------ groups
#: model weights: the broadcast global model, a client's upload
WEIGHTS = "weights"
#: client state: entries that keep their local value (FedBN's norms)
LOCAL = "local"
#: heads aggregated with the encoder (self-supervised methods)
SHARED = "shared"
#: client state: heads that never leave the client (FedAD's disentangling head)
LOCAL_HEADS = "local_heads"
#: what the server pooled: statistics without the receiver's own entries, pooled
#: images, or (server state) every client's synthetic slides
POOL = "pool"
#: a client's synthetic slides (FedHD distill reply)
SYNTHETIC = "synthetic"
#: the other clients' synthetic slides (FedHD fit broadcast; kept in client state)
RECEIVED = "received"
#: a client's real slide embeddings (pooled_mil only: not private)
REAL_SLIDES = "real_slides"
#: client state: a client's own MIL model
MODEL = "model"
#: the other clients' amplitude spectra (ELCFS fit broadcast)
AMPLITUDE_BANK = "amplitude_bank"
#: client state: MOON's previous local model
MOON_PREV = "moon_prev"
