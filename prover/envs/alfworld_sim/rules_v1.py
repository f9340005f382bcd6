"""The sim's first tables (``alfworld-sim-v1``): its own room kinds, placements and object properties.

These were written in the spirit of ALFRED's scenes rather than from ALFWorld's data, and they differ
from it (about 130 placements ALFWorld allows are missing and 17 it forbids exist, towels
can be cleaned, and only the task's lamp type can be switched on). They stay, unchanged, so that
results obtained with ``alfworld-sim-v1`` can be reproduced; ``rules.py`` builds both rule sets.
"""

from __future__ import annotations

# Room kind -> receptacle type -> most instances in one room.
ROOMS: dict[str, dict[str, int]] = {
    "kitchen": {"cabinet": 8, "coffeemachine": 1, "countertop": 3, "diningtable": 1, "drawer": 6,
                "fridge": 1, "garbagecan": 1, "microwave": 1, "shelf": 3, "sinkbasin": 2,
                "stoveburner": 4, "toaster": 1},
    "livingroom": {"armchair": 2, "cabinet": 4, "coffeetable": 1, "diningtable": 1, "drawer": 6,
                   "dresser": 1, "garbagecan": 1, "shelf": 6, "sidetable": 3, "sofa": 1, "tvstand": 1},
    "bedroom": {"armchair": 1, "bed": 1, "desk": 2, "drawer": 8, "dresser": 1, "garbagecan": 1,
                "laundryhamper": 1, "safe": 1, "shelf": 6, "sidetable": 2},
    "bathroom": {"bathtubbasin": 1, "cabinet": 4, "countertop": 1, "drawer": 4, "garbagecan": 1,
                 "handtowelholder": 1, "shelf": 3, "sinkbasin": 2, "toilet": 1, "toiletpaperhanger": 1,
                 "towelholder": 1},
}

# Object type: (rooms it appears in, receptacle types that can hold it, properties).
# Properties: h heatable, c coolable, w cleanable (washable), t a lamp (switched on, never carried).
OBJECT_ROWS = {
    "apple": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "bread": ("kitchen", "countertop diningtable fridge garbagecan microwave", "hc"),
    "egg": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "lettuce": ("kitchen", "countertop diningtable fridge garbagecan sinkbasin", "cw"),
    "potato": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "tomato": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "cup": ("kitchen", "cabinet countertop diningtable fridge microwave shelf sinkbasin", "hcw"),
    "mug": ("kitchen", "cabinet coffeemachine countertop diningtable fridge microwave shelf sinkbasin",
            "hcw"),
    "plate": ("kitchen", "cabinet countertop diningtable fridge microwave shelf sinkbasin", "hcw"),
    "bowl": ("kitchen", "cabinet countertop diningtable fridge microwave shelf sinkbasin", "cw"),
    "pan": ("kitchen", "cabinet countertop diningtable fridge sinkbasin stoveburner", "cw"),
    "pot": ("kitchen", "cabinet countertop diningtable fridge sinkbasin stoveburner", "cw"),
    "fork": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "knife": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "ladle": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "spatula": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "spoon": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "saltshaker": ("kitchen", "cabinet countertop diningtable drawer shelf", ""),
    "peppershaker": ("kitchen", "cabinet countertop diningtable drawer shelf", ""),
    "winebottle": ("kitchen", "cabinet countertop diningtable fridge garbagecan shelf", "c"),
    "dishsponge": ("kitchen bathroom", "bathtubbasin cabinet countertop drawer shelf sinkbasin toilet", "w"),
    "soapbottle": ("kitchen bathroom", "cabinet countertop diningtable garbagecan shelf toilet", ""),
    "alarmclock": ("bedroom livingroom", "desk dresser shelf sidetable", ""),
    "book": ("bedroom livingroom", "armchair bed coffeetable desk diningtable drawer dresser shelf "
             "sidetable sofa", ""),
    "box": ("bedroom livingroom", "armchair cabinet coffeetable desk diningtable dresser shelf sidetable "
            "sofa", ""),
    "cd": ("bedroom livingroom", "cabinet coffeetable desk drawer dresser garbagecan safe shelf sidetable",
           ""),
    "cellphone": ("bedroom livingroom", "armchair bed coffeetable desk diningtable drawer dresser safe "
                  "shelf sidetable sofa", ""),
    "creditcard": ("bedroom livingroom", "armchair coffeetable desk diningtable drawer dresser safe shelf "
                   "sidetable sofa", ""),
    "keychain": ("bedroom livingroom", "armchair cabinet coffeetable desk diningtable drawer dresser safe "
                 "shelf sidetable sofa", ""),
    "laptop": ("bedroom livingroom", "armchair bed coffeetable desk diningtable dresser sidetable sofa", ""),
    "newspaper": ("livingroom", "armchair coffeetable diningtable dresser garbagecan sidetable sofa tvstand",
                  ""),
    "pen": ("bedroom livingroom", "coffeetable desk drawer dresser garbagecan shelf sidetable", ""),
    "pencil": ("bedroom livingroom", "coffeetable desk drawer dresser garbagecan shelf sidetable", ""),
    "pillow": ("bedroom livingroom", "armchair bed sofa", ""),
    "remotecontrol": ("livingroom", "armchair cabinet coffeetable diningtable drawer dresser sidetable sofa "
                      "tvstand", ""),
    "statue": ("livingroom", "cabinet coffeetable desk diningtable dresser shelf sidetable tvstand", ""),
    "vase": ("livingroom", "cabinet coffeetable desk diningtable dresser shelf sidetable tvstand", ""),
    "watch": ("bedroom livingroom", "cabinet coffeetable desk drawer dresser safe shelf sidetable", ""),
    "cloth": ("bathroom bedroom", "bathtubbasin cabinet countertop drawer dresser garbagecan laundryhamper "
              "shelf sinkbasin toilet", "w"),
    "candle": ("bathroom", "bathtubbasin cabinet countertop drawer shelf toilet", ""),
    "handtowel": ("bathroom", "countertop handtowelholder", "w"),
    "soapbar": ("bathroom", "bathtubbasin cabinet countertop garbagecan shelf sinkbasin toilet", "w"),
    "spraybottle": ("bathroom", "cabinet countertop drawer garbagecan shelf toilet", ""),
    "tissuebox": ("bathroom bedroom livingroom", "cabinet coffeetable countertop desk dresser garbagecan "
                  "shelf sidetable toilet", ""),
    "toiletpaper": ("bathroom", "cabinet countertop drawer garbagecan shelf toilet toiletpaperhanger", ""),
    "towel": ("bathroom", "countertop towelholder", "w"),
    "desklamp": ("bedroom livingroom", "desk dresser sidetable", "t"),
    "floorlamp": ("bedroom livingroom", "armchair dresser sidetable sofa", "t"),
}
