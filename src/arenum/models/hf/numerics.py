"""float64 log-softmax of a causal LM's logits, full rows and table heads.

Every path (dense rows, table heads, the prompt row, teacher forcing) computes a log-prob as
``float64(logit) * scale - lse`` with ``lse`` the float64 log-sum-exp of the scaled row, so the same
logits give bit-identical numbers whichever callback asked for them.  ``host=True`` (CPU tensors)
normalizes in numpy, a few rows at a time so the float64 work buffer stays in cache; ``host=False``
normalizes in torch where the logits are (a GPU), and only what is asked for leaves the device.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["HeadParts", "LogSoftmax64", "as_numpy", "row_offsets"]


def row_offsets(lse: np.ndarray, logits: torch.Tensor, scale: float) -> np.ndarray:
    """Each row's offset for ``batch_next_heads`` (``docs/store.md``): ``lse`` where the row's
    log-probs are ``float64(float32 logit) - lse`` (``scale == 1`` and logits of at most 32 bits:
    a store keeps the row as float32 logits plus this one float64, rebuilt bit for bit), else NaN."""
    if scale != 1.0 or logits.dtype == torch.float64:
        return np.full(lse.shape, np.nan)
    return np.asarray(lse, np.float64)


def as_numpy(logits: torch.Tensor) -> np.ndarray:
    """A CPU float32/float64 tensor as numpy (bf16/fp16 widened to float32, which is exact)."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.to(torch.float32)  # bf16/fp16 -> float32 is exact
    return logits.detach().numpy()


class LogSoftmax64:
    """float64 log-softmax of ``scale * logits`` over the last axis; holds the CPU work buffer."""

    CPU_ROWS = 8  # rows normalized per pass on CPU (keeps the float64 work buffer in cache)

    def __init__(self) -> None:
        self._work: np.ndarray | None = None

    def _buffer(self, n: int) -> np.ndarray:
        buf = self._work
        if buf is None or buf.shape[0] < n:
            buf = self._work = np.empty(n, np.float64)
        return buf[:n]

    @staticmethod
    def _scaled64(x: np.ndarray, out: np.ndarray, scale: float) -> np.ndarray:
        """``out = float64(x) * scale`` (CPU)."""
        if scale != 1.0:
            np.multiply(x, scale, out=out, dtype=np.float64)
        else:
            np.copyto(out, x, casting="safe")
        return out

    def _lse_cpu(self, x: np.ndarray, scale: float) -> np.ndarray:
        """float64 log-sum-exp of each scaled row of ``x`` (2-D, CPU), in cache-sized passes."""
        m, V = x.shape
        lse = np.empty(m, np.float64)
        step = self.CPU_ROWS
        buf = self._buffer(min(m, step) * V).reshape(-1, V)
        # max(float64(x) * s) == float64(max(x)) * s for s > 0 (rounding is monotone): max in float32
        mxs = x.max(axis=1).astype(np.float64)
        if scale != 1.0:
            mxs *= scale
        for a in range(0, m, step):
            w = buf[: min(step, m - a)]
            self._scaled64(x[a : a + step], w, scale)
            mx = mxs[a : a + step]
            np.subtract(w, mx[:, None], out=w)
            np.exp(w, out=w)
            lse[a : a + step] = mx + np.log(w.sum(axis=1))
        return lse

    def _write_rows_cpu(self, dst: np.ndarray, x: np.ndarray, scale: float) -> np.ndarray:
        """``dst = float64(x) * scale - lse`` row by row (``dst`` float64, same shape); returns ``lse``."""
        lse = self._lse_cpu(x, scale)
        self._scaled64(x, dst, scale)
        dst -= lse[:, None]
        return lse

    def rows(self, logits: torch.Tensor, scale: float, host: bool) -> torch.Tensor:
        """float64 log-softmax over the last axis, any leading shape (a CPU tensor when ``host``)."""
        if host:
            return self.rows_lse(logits, scale, host)[0]
        x64, lse_t = self._device_lse(logits, scale)  # on the device: no copy of the lse to the host
        return x64.sub_(lse_t)

    @staticmethod
    def _device_lse(logits: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(float64(logits) * scale, its log-sum-exp over the last axis, kept as a dimension)``."""
        x64 = logits.to(torch.float64)
        if scale != 1.0:
            x64 = x64 * scale
        return x64, torch.logsumexp(x64, dim=-1, keepdim=True)

    def rows_lse(self, logits: torch.Tensor, scale: float, host: bool) -> tuple[torch.Tensor, np.ndarray]:
        """:meth:`rows` and each row's ``lse`` (float64 numpy, the leading shape): the log-probs are
        ``float64(logit) * scale - lse`` exactly as computed (:func:`row_offsets`)."""
        shape = logits.shape
        V = shape[-1]
        if host:
            x = as_numpy(logits.reshape(-1, V))
            out = np.empty(x.shape, np.float64)
            lse = self._write_rows_cpu(out, x, scale)
            return torch.from_numpy(out).reshape(shape), lse.reshape(shape[:-1])
        x64, lse_t = self._device_lse(logits, scale)
        return x64.sub_(lse_t), lse_t.squeeze(-1).cpu().numpy()

    def write(self, dst: np.ndarray, rows: list[int], logits: torch.Tensor, scale: float, host: bool) -> None:
        """``dst[rows] = log_softmax(scale * logits)`` in float64 (``dst`` a numpy array)."""
        if host:
            x = as_numpy(logits)
            if all(b - a == 1 for a, b in zip(rows, rows[1:])):
                self._write_rows_cpu(dst[rows[0] : rows[-1] + 1], x, scale)
            else:
                tmp = np.empty(x.shape, np.float64)
                self._write_rows_cpu(tmp, x, scale)
                dst[rows] = tmp
        else:
            dst[rows] = self.rows(logits, scale, host).cpu().numpy()

    def heads(
        self, logits: torch.Tensor, floors: np.ndarray, scale: float, host: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Entries with log-prob ``>= floors[r]`` of each row: ``(row, col, logp, lse)``, row-major,
        ``lse`` each row's float64 log-sum-exp (``logp = float64(logit) * scale - lse[row]``).

        The same numbers as :meth:`rows`; only the selected entries and ``lse`` leave the device.
        """
        if host:
            x = as_numpy(logits)
            lse = self._lse_cpu(x, scale)
            # candidates by a float32 compare a hair below the threshold, then the exact test
            with np.errstate(invalid="ignore", over="ignore"):
                thr = (floors + lse) / scale
                cut = (thr - 1e-6 * (1.0 + np.abs(thr))).astype(x.dtype)
            cut[np.isnan(thr)] = -np.inf
            flat = np.flatnonzero(x >= cut[:, None])
            r, c = np.divmod(flat, x.shape[1])
            vals = x.reshape(-1)[flat].astype(np.float64)
            if scale != 1.0:
                vals *= scale
            vals -= lse[r]
            ok = vals >= floors[r]
            return r[ok], c[ok], vals[ok], lse
        lp, lse = self.rows_lse(logits, scale, host)
        f = torch.as_tensor(floors, dtype=torch.float64, device=lp.device)
        r, c = torch.nonzero(lp >= f[:, None], as_tuple=True)
        return r.cpu().numpy(), c.cpu().numpy(), lp[r, c].cpu().numpy(), lse


class HeadParts:
    """Table heads gathered chunk by chunk, assembled as ``(counts, tokens, log_probs)``.

    The layout of ``batch_next_heads`` (``docs/core.md``): entries concatenated in prefix order,
    ascending token ids inside a row.
    """

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []

    def add(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        """Entries ``(rows[j], cols[j], vals[j])``, row-major within the chunk."""
        self.rows.append(rows)
        self.cols.append(cols)
        self.vals.append(vals)

    def add_row(self, i: int, lp: np.ndarray, floor: float) -> None:
        """The entries of the full row ``lp`` at or above ``floor``, as row ``i``."""
        c = np.flatnonzero(lp >= floor)
        self.add(np.full(c.shape[0], i, np.int64), c, lp[c])

    def assemble(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(counts, tokens, log_probs)`` of ``n`` rows."""
        if not self.rows:
            return np.zeros(n, np.int64), np.zeros(0, np.int64), np.zeros(0)
        r = np.concatenate(self.rows)
        order = np.argsort(r, kind="stable")  # prefix order; columns stay ascending in a row
        tokens = np.concatenate(self.cols).astype(np.int64, copy=False)[order]
        logps = np.concatenate(self.vals)[order]
        counts = np.bincount(r, minlength=n).astype(np.int64)
        return counts, tokens, logps
