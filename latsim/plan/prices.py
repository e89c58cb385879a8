"""GPU-hour prices: the shipped list (``latsim/data/prices.yaml``), the catalog's rough figure
as a fallback, and the user's ``--price name=usd`` overrides.

Every :class:`Price` says where it came from, so a cost column can name the prices it used.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from latsim.catalog.lookup import load_device
from latsim.flagvalues import positive_number
from latsim.paths import DATA

PRICES_FILE = DATA / "prices.yaml"
FIELDS = ("usd_per_gpu_hour", "provider", "offer", "source", "as_of")


@dataclass(frozen=True)
class Price:
    """One GPU for one hour, in USD, with its provenance (``origin``: list | catalog | user)."""

    device: str
    usd_per_gpu_hour: float
    origin: str
    source: str
    as_of: str | None = None
    provider: str | None = None

    def label(self) -> str:
        """A short note for a table or figure: ``h100 $3.78/GPU-h (Lambda, 2026-05-07)``."""
        where = {"user": "--price", "catalog": "catalog estimate"}.get(self.origin, self.provider or self.source)
        date = f", {self.as_of}" if self.as_of else ""
        return f"{self.device} ${self.usd_per_gpu_hour:.2f}/GPU-h ({where}{date})"

    def as_dict(self) -> dict[str, object]:
        return {"usd_per_gpu_hour": self.usd_per_gpu_hour, "origin": self.origin, "provider": self.provider,
                "source": self.source, "as_of": self.as_of}


def read_price_list(path: Path = PRICES_FILE) -> dict[str, Price]:
    """The price list of ``path`` by catalog device name; ValueError names the file and entry."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    entries = doc.get("prices") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: expected a mapping under 'prices:'")
    out = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or sorted(entry) != sorted(FIELDS):
            raise ValueError(f"{path}: prices.{name} must have exactly {', '.join(FIELDS)}")
        usd = entry["usd_per_gpu_hour"]
        if not isinstance(usd, (int, float)) or not usd > 0:
            raise ValueError(f"{path}: prices.{name}.usd_per_gpu_hour must be > 0, got {usd!r}")
        device = load_device(str(name)).name
        source = f"{entry['provider']} {entry['offer']}, {entry['source']}"
        out[device] = Price(device, float(usd), "list", source, str(entry["as_of"]), str(entry["provider"]))
    return out


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Price]:
    return read_price_list()


def parse_price_overrides(specs: list[str] | None) -> dict[str, float]:
    """``["h100=2.49", "h200=3.5"]`` (or one comma-separated string) -> ``{"h100": 2.49, ...}``.

    Names are catalog devices or aliases (normalised to the catalog name); an unknown GPU raises
    the catalog's ValueError with close names, a bad number a ValueError naming it.
    """
    out: dict[str, float] = {}
    for spec in specs or []:
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"--price {item!r}: expected GPU=USD_PER_HOUR, e.g. h100=2.49")
            usd = positive_number(value, f"--price {item!r}: {value!r} is not a number of USD per GPU-hour",
                                  f"--price {item!r}: the price must be a finite number > 0")
            out[load_device(name.strip()).name] = usd
    return out


def price_of(device: str, overrides: dict[str, float] | None = None) -> Price:
    """The price of one GPU of ``device`` (catalog name or alias): the override, else the shipped
    list, else the catalog's rough figure."""
    spec = load_device(device)
    if overrides and spec.name in overrides:
        return Price(spec.name, overrides[spec.name], "user", "--price")
    listed = _shipped().get(spec.name)
    if listed is not None:
        return listed
    note = spec.sources.get("price_per_hour", "devices.yaml")
    return Price(spec.name, spec.price_per_hour, "catalog", f"latsim catalog: {note}")
