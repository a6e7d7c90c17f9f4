"""Units: the unit an answer was written in, and whether two units are the same or convert exactly.

The grading rule (math_answer.py's policy): a unit written on one side only is dropped; when the answer
and the reference both carry one, they must be the same unit after normalising its spelling (`min`,
`minute`, `minutes`; `ft^2`, `square feet`) or convert exactly within the table below (length, area and
volume from length, time, mass, speed, angle degrees/radians, money dollars/cents); otherwise the answer
is not correct, with a reason naming both units. Counted nouns outside the table ("eggs") must match;
"units" and "square units" (the problem's own unit) count as no unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

# spelling -> (canonical name, dimension, size in the dimension's base unit, power of pi in that size)
_UNITS: dict[str, tuple[str, str, Fraction, int]] = {}


def _add(names: str, canonical: str, dimension: str, size, pi_power: int = 0) -> None:
    for name in names.split():
        _UNITS[name] = (canonical, dimension, Fraction(size), pi_power)


_add("mm millimeter millimeters millimetre millimetres", "mm", "length", Fraction(1, 1000))
_add("cm centimeter centimeters centimetre centimetres", "cm", "length", Fraction(1, 100))
_add("m meter meters metre metres", "m", "length", 1)
_add("km kilometer kilometers kilometre kilometres", "km", "length", 1000)
_add("in inch inches", "in", "length", Fraction(254, 10000))
_add("ft foot feet", "ft", "length", Fraction(3048, 10000))
_add("yd yard yards", "yd", "length", Fraction(9144, 10000))
_add("mi mile miles", "mi", "length", Fraction(1609344, 1000))
_add("s sec secs second seconds", "s", "time", 1)
_add("min mins minute minutes", "min", "time", 60)
_add("h hr hrs hour hours", "h", "time", 3600)
_add("day days", "day", "time", 86400)
_add("week weeks wk wks", "week", "time", 604800)
_add("mg milligram milligrams", "mg", "mass", Fraction(1, 1000))
_add("g gram grams", "g", "mass", 1)
_add("kg kilogram kilograms kilo kilos", "kg", "mass", 1000)
_add("lb lbs pound pounds", "lb", "mass", Fraction(45359237, 100000))
_add("oz ounce ounces", "oz", "mass", Fraction(45359237, 1600000))
_add("ml mL milliliter milliliters millilitre millilitres", "mL", "volume", Fraction(1, 1000))
_add("l L liter liters litre litres", "L", "volume", 1)
_add("rad rads radian radians", "rad", "angle", 1)
_add("deg degree degrees °", "deg", "angle", Fraction(1, 180), 1)
_add("dollar dollars $ usd", "dollar", "money", 1)
_add("cent cents ¢", "cent", "money", Fraction(1, 100))
_SHORTHANDS = {"mph": "mi/h", "kph": "km/h", "kmh": "km/h", "mps": "m/s", "fps": "ft/s"}
_POWER = re.compile(r"\^\s*\{?\s*([23])\s*\}?$|\s+(squared|cubed)$")
_SQUARE = re.compile(r"^(?:square|sq\.?)\s+")
_CUBIC = re.compile(r"^(?:cubic|cu\.?)\s+")


@dataclass(frozen=True)
class Unit:
    """A unit as written, canonical: `name` ("ft^2", "km/h", "eggs"); `dimension` and `size` (in the
    dimension's base unit, times pi^`pi_power`) only for units in the table."""

    name: str
    dimension: str | None = None
    size: Fraction = Fraction(1)
    pi_power: int = 0


def read_unit(text: str | None) -> Unit | None:
    """The canonical unit of a unit's text as an answer wrote it (`cm^2`, "square feet", "km/h", "eggs")."""
    if not text:
        return None
    t = re.sub(r"\\(?:text|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", text).strip(" .{}")
    if not t:
        return None
    power = 1
    m = _POWER.search(t)
    if m:
        power = 2 if (m.group(1) == "2" or m.group(2) == "squared") else 3
        t = t[: m.start()].strip(" {}")
    elif _SQUARE.match(t):
        power, t = 2, _SQUARE.sub("", t)
    elif _CUBIC.match(t):
        power, t = 3, _CUBIC.sub("", t)
    if t.lower() in ("unit", "units"):
        return None  # "36 units", "9 square units": the problem's own unit, whatever it is
    t = _SHORTHANDS.get(t.lower(), t)
    parts = [p.strip(" .{}") for p in re.split(r"\s*/\s*|\s+per\s+", t, maxsplit=1)]
    looked_up = [_UNITS.get(p) or _UNITS.get(p.lower()) for p in parts]
    if all(looked_up) and parts:
        (name, dimension, size, pi_power) = looked_up[0]
        if len(parts) == 2:
            name2, dimension2, size2, pi2 = looked_up[1]
            name, dimension, size, pi_power = f"{name}/{name2}", f"{dimension}/{dimension2}", size / size2, pi_power - pi2
        if power > 1:
            name, dimension, size, pi_power = f"{name}^{power}", f"{dimension}^{power}", size**power, pi_power * power
        if dimension == "length^3":  # 1 cm^3 is 1 mL: a cubed length is a volume (base unit the litre)
            dimension, size = "volume", size * 1000
        return Unit(name, dimension, size, pi_power)
    words = " ".join(w.rstrip("s") if len(w) > 3 else w for w in t.lower().split())  # "eggs" is "egg"
    return Unit(words + (f"^{power}" if power > 1 else ""))


@dataclass(frozen=True)
class Conversion:
    """From the answer's unit to the reference's: multiply by `factor` * pi^`pi_power`; or `refused`."""

    factor: Fraction = Fraction(1)
    pi_power: int = 0
    refused: str | None = None

    @property
    def identity(self) -> bool:
        return self.factor == 1 and self.pi_power == 0 and self.refused is None


def conversion(answer_unit: Unit | None, reference_unit: Unit | None) -> Conversion | None:
    """None when a side has no unit (it is dropped); else how the answer's value reads in the reference's unit."""
    if answer_unit is None or reference_unit is None:
        return None
    if answer_unit.name == reference_unit.name:
        return Conversion()
    if answer_unit.dimension is not None and answer_unit.dimension == reference_unit.dimension:
        return Conversion(answer_unit.size / reference_unit.size, answer_unit.pi_power - reference_unit.pi_power)
    return Conversion(refused=f"units differ: the answer is in {answer_unit.name}, the reference in {reference_unit.name}")
