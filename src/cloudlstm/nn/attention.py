"""Soft attention between decoder and encoder states (Luong et al. 2015) with the
paper's convolutional score ``e_ij = v^T tanh(W * [H_enc_j; H_dec_i])``.

``W *`` is a (simplified, no-sigmoid) DConv. A DConv sums over input channels, each
with its own neighbours, so ``W * [H_enc_j; H_dec_i] = W_enc * H_enc_j + W_dec * H_dec_i``
exactly: the encoder half is computed once per sequence instead of once per
(decoder step, encoder step) pair. ``v`` weights channels and features and is shared
over points; the per-point scores are averaged over points so the score is one number
per pair (i, j) and does not depend on point order. Weights are a softmax over j.

Both projections take the neighbours of their states when the caller has them: the
states are the top layer's hidden states, whose neighbours the seq2seq model has already
searched for the next step (:class:`~cloudlstm.models.CloudSeq2Seq`).
"""

from __future__ import annotations

import torch
from torch import nn

from cloudlstm.nn.dconv import DConv


class CloudAttention(nn.Module):
    def __init__(
        self,
        channels: int,
        k: int,
        value_features: int = 1,
        coord_features: int = 2,
        coordinates: str | None = "absolute",
    ):
        super().__init__()
        features = value_features + coord_features
        shape = (channels, channels, k, value_features, coord_features)
        common = dict(coord_activation=False, coordinates=coordinates)
        self.encoder_proj = DConv(*shape, **common)
        self.decoder_proj = DConv(*shape, bias=False, **common)
        self.score = nn.Parameter(torch.randn(channels, features) / (channels * features) ** 0.5)

    def project_encoder(
        self, encoder_states: torch.Tensor, neighbours: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(B, M, N, U, F)`` top-layer encoder states, optionally their ``(B, M, N, U, K)``
        neighbours (of any integer type) -> ``(B, M, N, U, F)`` keys."""
        b, m = encoder_states.shape[:2]
        if neighbours is not None:
            neighbours = neighbours.flatten(0, 1)
        keys = self.encoder_proj(encoder_states.flatten(0, 1), neighbours)
        return keys.view(b, m, *keys.shape[1:])

    def forward(
        self,
        decoder_state: torch.Tensor,
        encoder_states: torch.Tensor,
        keys: torch.Tensor,
        decoder_neighbours: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Context for one decoder step.

        Args:
            decoder_state: ``(B, N, U, F)`` top-layer decoder hidden state H_dec_i.
            encoder_states: ``(B, M, N, U, F)`` top-layer encoder hidden states H_enc_j.
            keys: :meth:`project_encoder` of ``encoder_states``.
            decoder_neighbours: optional ``(B, N, U, K)`` neighbours of ``decoder_state``
                (of any integer type).

        Returns:
            context ``(B, N, U, F)`` and attention weights ``(B, M)``.
        """
        query = self.decoder_proj(decoder_state, decoder_neighbours)[:, None]  # (B, 1, N, U, F)
        scores = (torch.tanh(keys + query) * self.score).sum(dim=(-1, -2)).mean(dim=-1)
        weights = torch.softmax(scores, dim=1)  # (B, M)
        context = torch.einsum("bm,bmnuf->bnuf", weights, encoder_states)
        return context, weights
