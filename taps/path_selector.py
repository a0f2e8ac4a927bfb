"""DFlash2's path selector: one draft chain through the drafter's top-K candidates per position.

The drafter's marginals say nothing about how neighbouring positions fit together: DFlash's
argmax chain can pair a token at t-1 with a token at t that never follow each other. DFlash2 keeps
each position's top-K candidates (K = `selector_top_k`, 16 in the public checkpoints) and scores
every transition from a candidate a at t-1 to a candidate b at t:

    S_t(a, b) = U_t(b) + <A(a) * H(h_t), B(b)>

- U_t(b): the drafter's own logit of b at block position t. Only differences between candidates
  of one position matter (a softmax or an argmax over b), so its log-prob serves as well: this
  module takes the log-probs the lattice holds.
- A = `predecessor_codebook` [V, r] and B = `successor_codebook` [V, r]: low-rank token embeddings
  (r = `selector_rank`: 256 in the public 27B checkpoint, 64 in the shipped pair's).
- H(h_t) = `hidden_projection`(h_t) [r]: the drafter's final hidden state at t (after its last
  norm, the state its logits come from) through one linear map, without bias or nonlinearity. That
  is the public form: the published checkpoints carry the one matrix
  `candidate_selector.hidden_projection.weight` [r, d], and the public inference code multiplies
  its output straight into A(a); a sigmoid (or any other squashing) would not read those weights.
  A linear H is a gate all the same: per rank channel, the hidden state scales (and can switch
  off or flip) how much the predecessor's channel counts at this position.

The walk starts at the verified anchor (the round's root token, whose A row scores position 1)
and takes one candidate per position:
- at T = 0 the argmax of S_t(prev, .) over the candidates;
- at T > 0 a draw from q_t = softmax(S_t(prev, .) / T) over the candidates (zero elsewhere in the
  vocabulary): the whole score is tempered as the target's logits are (logits / T), and the drafter's
  part is the lattice's tempered log-prob, log_softmax(logits / T), equal to U_t / T up to a
  constant. The draw is a Gumbel-max draw over the candidates, argmax(S_t / T + g), which is an
  exact sample from q_t; the session passes the Gumbel noise of the target's own draw at the same
  sequence position (`taps.verify.gumbel_noise`), so the draft and the target's token are coupled
  (equal more often than independent draws would be) while the walk stays an exact draw from q.

`PathWalk` holds the chain, its candidates and every q_t; `PathWalk.q(vocab)` is the walk's draft
distribution over the whole vocabulary. How the engine verifies a chain does not depend on q: the
target's own token (its argmax, or its seeded Gumbel-max draw) is taken at every position and the
chain is accepted while they agree (`taps.verify.walk`), which is lossless for any draft and gives
exactly plain decoding's tokens for the same seed. (The textbook rule, accept with min(1, p/q) and
resample from max(0, p - q), is lossless in distribution only: it would not reproduce plain
sampling token for token, which this engine's invariants ask.)

Saved on its own (our trained selector, `python -m taps.train path_selector`) as a folder with
`config.json` ({"model_type": "dflash2_path_selector", vocab_size, hidden_size, selector_rank,
selector_top_k, gate}) and `model.safetensors` (`hidden_projection.weight`, `predecessor_codebook`,
`successor_codebook`); inside a public DFlash2 drafter checkpoint the same tensors sit under
`candidate_selector.` (`taps.dflash2`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

MODEL_TYPE = "dflash2_path_selector"
GATE = "linear"                   # H(h) = W h: the published form (see the module docstring)
TOP_K = 16                        # DFlash2's candidates per position (public checkpoints)


@dataclass
class PathSelectorConfig:
    vocab_size: int
    hidden_size: int
    selector_rank: int = 32
    selector_top_k: int = TOP_K
    gate: str = GATE


class PathSelector(nn.Module):
    """A, B and H of DFlash2's transition score (names as in the public checkpoints, less their
    `candidate_selector.` prefix)."""

    def __init__(self, config: PathSelectorConfig, init_std: float = 0.02):
        super().__init__()
        if config.gate != GATE:
            raise ValueError(f"unknown path selector gate '{config.gate}': this version has '{GATE}' only")
        if config.selector_rank < 1 or config.selector_top_k < 1:
            raise ValueError(f"selector_rank and selector_top_k must be at least 1, got {config.selector_rank} "
                             f"and {config.selector_top_k}")
        self.config = config
        r = config.selector_rank
        self.hidden_projection = nn.Linear(config.hidden_size, r, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.empty(config.vocab_size, r))
        self.successor_codebook = nn.Parameter(torch.empty(config.vocab_size, r))
        if init_std > 0:
            for p in self.parameters():
                nn.init.normal_(p, std=init_std)

    @property
    def top_k(self) -> int:
        return int(self.config.selector_top_k)

    def gate(self, hidden: torch.Tensor) -> torch.Tensor:
        """H(h) [..., r] of drafter hidden states [..., d]."""
        weight = self.hidden_projection.weight
        return hidden.to(weight.dtype) @ weight.T

    def pair_scores(self, prev: torch.Tensor, gate: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """<A(prev) * H, B(c)> [N, K] for predecessors prev [N], gates [N, r] and candidates [N, K]."""
        a = self.predecessor_codebook[prev] * gate                         # [N, r]
        return (self.successor_codebook[candidates] @ a.unsqueeze(-1)).squeeze(-1)

    def transitions(self, root: int, hidden: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """Every adjacent pair's score at once: [H, K, K], entry [t, i, j] = <A(a_i) * H(h_t), B(c_tj)>
        where a_i is candidate i of position t-1, and for the first position every row is the root's
        (hidden [H, d], candidates [H, K] token ids)."""
        gate = self.gate(hidden)                                             # [H, r]
        prev = torch.cat([torch.full_like(candidates[:1], int(root)), candidates[:-1]])
        a = self.predecessor_codebook[prev] * gate.unsqueeze(1)             # [H, K, r]
        return a @ self.successor_codebook[candidates].transpose(1, 2)

    def lattice_transitions(self, root: int, lattice, depth: int, reader: str) -> tuple:
        """The drafter's top-K candidates at depths 1..depth of a round's lattice (`Lattice.candidates`),
        their tempered log-probs [depth, K] and every adjacent pair's score [depth, K, K]
        (`transitions`), as numpy: what DFlash2's walk and the selector estimator both read. `reader`
        names which, for the message when the lattice has no hidden states."""
        if lattice.hidden is None:
            raise ValueError(f"{reader} reads the drafter's hidden states, and this lattice has none")
        candidates, unary = lattice.candidates(self.top_k, depth)
        with torch.inference_mode():
            device = self.predecessor_codebook.device
            pairs = self.transitions(int(root), lattice.hidden[:depth].to(device),
                                     torch.as_tensor(candidates, device=device))
        return candidates, unary, pairs.double().cpu().numpy()

    # ----------------------------------------------------------------------- files
    def save_pretrained(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({"model_type": MODEL_TYPE, **asdict(self.config)}, indent=2)
                                          + "\n")
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "PathSelector":
        path = Path(path)
        if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"no DFlash2 path selector (config.json + model.safetensors) in {path}")
        raw = json.loads((path / "config.json").read_text())
        if raw.pop("model_type", None) != MODEL_TYPE:
            raise ValueError(f"{path}/config.json is not a DFlash2 path selector config (model_type "
                             f"\"{MODEL_TYPE}\")")
        known = set(PathSelectorConfig.__dataclass_fields__)
        model = cls(PathSelectorConfig(**{k: v for k, v in raw.items() if k in known}), init_std=0.0)
        state = load_file(str(path / "model.safetensors"))
        own = model.state_dict()
        wrong = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
        if wrong or set(state) != set(own):
            raise ValueError(f"the path selector weights in {path} do not fit its config.json (differing: "
                             f"{wrong[:3] or sorted(set(state) ^ set(own))[:3]})")
        model.load_state_dict(state, strict=True)
        return model.to(device=device, dtype=dtype).eval()


def check_selector_fit(selector: PathSelector, vocab_size: int, hidden_size: int) -> str:
    """Why this selector does not fit a pair of this vocabulary and drafter width ('' when it does)."""
    cfg = selector.config
    if cfg.vocab_size != vocab_size:
        return f"the path selector's vocabulary is {cfg.vocab_size} but the target's is {vocab_size}"
    if cfg.hidden_size != hidden_size:
        return f"the path selector reads hidden states of size {cfg.hidden_size} but the drafter's are {hidden_size}"
    return ""


# ------------------------------------------------------------------------------------- the walk
@dataclass
class PathWalk:
    tokens: np.ndarray        # [H] the chain's tokens at depths 1..H
    choice: np.ndarray        # [H] each token's index among its position's candidates (its drafter rank)
    candidates: np.ndarray    # [H, K] candidate token ids per position, the drafter's best first
    probs: np.ndarray         # [H, K] q_t over the candidates given the walk's token at t-1 (rows sum to 1)

    @property
    def chosen_prob(self) -> np.ndarray:
        """[H] q_t of the token the walk took at each position."""
        return self.probs[np.arange(len(self.tokens)), self.choice]

    def q(self, vocab: int) -> np.ndarray:
        """[H, vocab] the walk's draft distribution at each position over the whole vocabulary:
        q_t on the candidates, zero elsewhere."""
        out = np.zeros((len(self.tokens), vocab))
        np.put_along_axis(out, self.candidates, self.probs, axis=1)
        return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def walk(unary: np.ndarray, transitions: np.ndarray, candidates: np.ndarray, temperature: float,
         noise: np.ndarray | None = None) -> PathWalk:
    """The walk from the anchor: `unary` [H, K] the candidates' drafter log-probs at the temperature
    (log_softmax(logits / T) at T > 0, of the logits at T = 0), `transitions` [H, K, K] (row 0 of
    position 0 is the anchor's, `PathSelector.transitions`), `candidates` [H, K]. At T > 0 `noise`
    [H, K] is Gumbel noise of the candidates: the pick is argmax(S / T + g), a draw from q_t."""
    if temperature > 0 and noise is None:
        raise ValueError("a walk at T > 0 needs the Gumbel noise of its draws")
    scale = 1.0 / temperature if temperature > 0 else 1.0
    depth, k = unary.shape
    probs = np.zeros((depth, k))
    choice = np.zeros(depth, dtype=np.int64)
    prev = 0
    for t in range(depth):
        scores = unary[t] + scale * transitions[t, prev]
        probs[t] = _softmax(scores)
        prev = int(np.argmax(scores + noise[t] if temperature > 0 else scores))
        choice[t] = prev
    tokens = candidates[np.arange(depth), choice]
    return PathWalk(tokens=np.asarray(tokens, dtype=np.int64), choice=choice, candidates=np.asarray(candidates),
                    probs=probs)
